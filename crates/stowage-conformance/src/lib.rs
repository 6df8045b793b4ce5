#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod cases;
pub mod check;
pub mod context;
pub mod corrupt;
pub mod crash;
pub mod generate;
pub mod outcome;
pub mod python;
pub mod reference;
mod runner;
pub mod symlinks;

pub use context::{CaseContext, ChildLauncher};
pub use outcome::{CaseResult, Outcome, Report};
pub use runner::{BoxedFactory, run_all, run_case, run_case_as_test, run_subset};
pub use stowage_core;

/// One conformance case: its name (also the `#[test]` name) and its body.
#[derive(Clone, Copy)]
pub struct Case {
    /// Verb-first name, the same as the `# Behavior` bullet it checks.
    pub name: &'static str,
    /// The case body.
    pub run: fn(&CaseContext<'_>) -> CaseResult,
}

/// The single list of cases. `$callback!` receives the extra tokens then every case name, so the
/// same list builds [`CASES`] and the tests of [`backend_conformance!`].
#[doc(hidden)]
#[macro_export]
macro_rules! __with_case_list {
    ($callback:ident! $($extra:tt)*) => {
        $crate::$callback! { ($($extra)*)
            round_trip_every_dtype
            round_trip_scalar_and_zero_length_tensors
            round_trip_multi_megabyte_tensor
            variable_shapes_follow_capability
            ragged_shapes_follow_capability
            nullable_fields_follow_capability
            bytes_fields_follow_capability
            json_fields_follow_capability
            ten_thousand_keys_round_trip
            unicode_and_long_keys_round_trip
            empty_key_is_rejected
            get_missing_key_is_none
            reopen_after_flush_keeps_samples
            reopen_after_finalize_keeps_samples
            put_after_finalize_is_rejected
            duplicate_key_follows_overwrite_capability
            schema_violation_writes_nothing
            read_only_handle_rejects_writes
            create_over_existing_cache_is_rejected
            open_missing_cache_is_not_found
            resume_follows_capability
            zero_copy_get_follows_capability
            validate_clean_cache_reports_no_problem
            flipped_byte_is_detected
            truncated_file_is_detected
            deleted_file_is_detected
            stray_files_are_ignored
            second_writer_is_refused
            concurrent_readers_see_identical_samples
            crash_loses_no_flushed_sample
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __case_table {
    (() $($case:ident)*) => {
        &[$($crate::Case { name: stringify!($case), run: $crate::cases::$case }),*]
    };
}

/// The cases re-run through a doubly boxed backend: every trait method is forwarded by them.
pub const BOXED_SUBSET: &[&str] = &[
    "round_trip_every_dtype",
    "get_missing_key_is_none",
    "duplicate_key_follows_overwrite_capability",
    "put_after_finalize_is_rejected",
    "reopen_after_flush_keeps_samples",
    "read_only_handle_rejects_writes",
    "validate_clean_cache_reports_no_problem",
];

/// Every case, in the order [`run_all`] runs them.
pub const CASES: &[Case] = __with_case_list!(__case_table!);

#[doc(hidden)]
#[macro_export]
macro_rules! __case_tests {
    (($factory:expr) $($case:ident)*) => {
        $(
            #[test]
            fn $case() {
                $crate::run_case_as_test(
                    &$factory,
                    $crate::Case { name: stringify!($case), run: $crate::cases::$case },
                    module_path!(),
                );
            }
        )*

        /// Runs the lifecycle cases once more with each backend wrapped in a second `Box`, so the
        /// forwarding `impl Backend for Box<B>` is exercised as well as `Box<dyn Backend>`.
        #[test]
        fn lifecycle_cases_through_boxed_backend() {
            let report = $crate::run_subset(&$crate::BoxedFactory(&$factory), $crate::BOXED_SUBSET);
            eprintln!("{report}");
            assert!(report.is_success(), "{report}");
        }
    };
}

/// Generates one `#[test]` per conformance case for the factory expression `$factory` (evaluated
/// afresh in each test), plus one test that re-runs the [`BOXED_SUBSET`] through a doubly boxed
/// backend.
///
/// ```text
/// stowage_conformance::backend_conformance!(stowage_npy::NpyFactory::default());
/// ```
#[macro_export]
macro_rules! backend_conformance {
    ($factory:expr) => {
        $crate::__with_case_list!(__case_tests! $factory);
    };
}
