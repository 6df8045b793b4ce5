//! A measured rate and the table row that holds it: what criterion's results and the Python peers
//! are both turned into, so the table compares them without knowing where they came from.

/// How much one iteration of a benchmark processes, from criterion's `benchmark.json`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Throughput {
    /// Rows (criterion's `Elements`, or the elements of `ElementsAndBytes`).
    Rows(u64),
    /// Bytes (`Bytes` or `BytesDecimal`).
    Bytes(u64),
    /// Bits.
    Bits(u64),
}

impl Throughput {
    /// The amount and what it counts, for the rate and the "per N rows" column.
    pub fn amount_and_unit(self) -> (u64, Unit) {
        match self {
            Throughput::Rows(n) => (n, Unit::Rows),
            Throughput::Bytes(n) => (n, Unit::Bytes),
            Throughput::Bits(n) => (n, Unit::Bits),
        }
    }
}

/// What a rate counts per second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Rows (criterion's elements).
    Rows,
    /// Bytes.
    Bytes,
    /// Bits.
    Bits,
    /// The benchmark declared no throughput: iterations per second.
    Iterations,
    /// Mebibytes: a level the bench measured (resident memory, say), not a rate.
    Mebibytes,
    /// Milliseconds: a level such as the median latency of single requests.
    Milliseconds,
    /// Requests a store received: a level such as what an open costs.
    Requests,
    /// Microseconds: a level such as the Python overhead of one call.
    Microseconds,
}

impl Unit {
    /// The unit as the table writes it (`rows/s`, `B/s`, `MiB`, `ms`, `requests`, `µs`), and as
    /// `measurements.json` names a level's.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Rows => "rows",
            Unit::Bytes => "B",
            Unit::Bits => "bit",
            Unit::Iterations => "iter",
            Unit::Mebibytes => "MiB",
            Unit::Milliseconds => "ms",
            Unit::Requests => "requests",
            Unit::Microseconds => "µs",
        }
    }

    /// Whether it counts an amount rather than an amount per second.
    pub fn is_level(self) -> bool {
        matches!(self, Unit::Mebibytes | Unit::Milliseconds | Unit::Requests | Unit::Microseconds)
    }

    /// The level unit `measurements.json` names `name`, if any.
    pub fn level_named(name: &str) -> Option<Unit> {
        [Unit::Mebibytes, Unit::Milliseconds, Unit::Requests, Unit::Microseconds]
            .into_iter()
            .find(|unit| unit.name() == name)
    }
}

/// One measured rate.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    /// Criterion's mean time of one iteration (none for a Python peer).
    pub mean_ns: Option<f64>,
    /// What one iteration processes (none for a Python peer or without a declared throughput).
    pub per_iteration: Option<Throughput>,
    /// Units per second for a rate, the amount itself for a level ([`Unit::is_level`]).
    pub value: f64,
    /// What `value` counts.
    pub unit: Unit,
}

impl Measured {
    /// From criterion's mean time per iteration: rate = amount / (mean_ns * 1e-9).
    pub fn from_criterion(mean_ns: f64, per_iteration: Option<Throughput>) -> Measured {
        let (amount, unit) =
            per_iteration.map_or((1, Unit::Iterations), Throughput::amount_and_unit);
        Measured {
            mean_ns: Some(mean_ns),
            per_iteration,
            value: amount as f64 / (mean_ns * 1e-9),
            unit,
        }
    }

    /// A level the bench left in its measurements file, in `unit`.
    pub fn level(value: f64, unit: Unit) -> Measured {
        Measured { mean_ns: None, per_iteration: None, value, unit }
    }

    /// A rate a Python peer reported: rows per second, with no iteration behind it.
    pub fn rows_per_second(per_second: f64) -> Measured {
        Measured { mean_ns: None, per_iteration: None, value: per_second, unit: Unit::Rows }
    }
}

/// One line of the table: a benchmark or a peer rate, with the reason when it is missing.
#[derive(Clone, Debug)]
pub struct Row {
    /// The benchmark id or peer rate name.
    pub name: String,
    /// The rate, or why there is none.
    pub measured: Result<Measured, String>,
}
