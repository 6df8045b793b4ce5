#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod cases;
pub mod check;
pub mod child;
pub mod context;
pub mod contract;
pub mod corrupt;
pub mod crash;
pub mod durable_image;
mod failure;
pub mod faults;
pub mod generate;
pub mod injector;
pub mod io_errors;
pub mod outcome;
pub mod power_loss;
mod runner;
pub mod snapshot;
pub mod storage;
pub mod symlinks;

pub use context::{CaseContext, ChildLauncher};
pub use failure::Failure;
pub use faults::FaultInjector;
pub use outcome::{CaseResult, Outcome, Report};
pub use runner::{
    BoxedFactory, run_all, run_all_on, run_case, run_case_as_test, run_case_as_test_on,
    run_case_as_test_with, run_case_on, run_case_with, run_subset, run_subset_on,
};
pub use storage::{CacheStorage, LocalFiles};
pub use stowage_core;

/// One conformance case: its name (also the `#[test]` name), the contract clauses it checks,
/// and its body.
#[derive(Clone, Copy)]
pub struct Case {
    /// Verb-first name, saying what the case checks.
    pub name: &'static str,
    /// The ids of the clauses of [`stowage_core::contract::CLAUSES`] the case checks.
    pub clauses: &'static [&'static str],
    /// The case body.
    pub run: fn(&CaseContext<'_>) -> CaseResult,
}

/// The single list of cases, each with the contract clauses it checks. `$callback!` receives
/// the extra tokens then every `case [clause, ...]`, so the same list builds [`CASES`] and the
/// tests of [`backend_conformance!`].
#[doc(hidden)]
#[macro_export]
macro_rules! __with_case_list {
    ($callback:ident! $($extra:tt)*) => {
        $crate::$callback! { ($($extra)*)
            round_trip_every_dtype [
                "get.returns-what-was-put", "capabilities.declared-works",
                "capabilities.undeclared-unsupported", "errors.unsupported-names-backend"
            ]
            round_trip_scalar_and_zero_length_tensors ["get.returns-what-was-put"]
            round_trip_multi_megabyte_tensor ["get.returns-what-was-put"]
            variable_shapes_follow_capability [
                "capabilities.declared-works", "capabilities.undeclared-unsupported",
                "create.unsupported-schema-creates-nothing", "errors.unsupported-names-backend"
            ]
            ragged_shapes_follow_capability [
                "capabilities.declared-works", "capabilities.undeclared-unsupported",
                "create.unsupported-schema-creates-nothing", "errors.unsupported-names-backend"
            ]
            nullable_fields_follow_capability [
                "capabilities.declared-works", "capabilities.undeclared-unsupported",
                "create.unsupported-schema-creates-nothing", "errors.unsupported-names-backend"
            ]
            bytes_fields_follow_capability [
                "capabilities.declared-works", "capabilities.undeclared-unsupported",
                "create.unsupported-schema-creates-nothing", "errors.unsupported-names-backend"
            ]
            json_fields_follow_capability [
                "capabilities.declared-works", "capabilities.undeclared-unsupported",
                "create.unsupported-schema-creates-nothing", "errors.unsupported-names-backend"
            ]
            capabilities_match_the_factory [
                "capabilities.match-factory", "errors.unsupported-names-backend"
            ]
            max_rank_is_enforced [
                "capabilities.max-rank", "create.unsupported-schema-creates-nothing",
                "errors.unsupported-names-backend"
            ]
            ten_thousand_keys_round_trip [
                "get.returns-what-was-put", "keys.first-put-order", "len.counts-distinct-keys",
                "contains.agrees-with-get"
            ]
            unicode_and_long_keys_round_trip [
                "get.returns-what-was-put", "capabilities.declared-works",
                "errors.unsupported-names-backend"
            ]
            empty_key_is_rejected ["put.empty-key-is-invalid", "errors.unsupported-names-backend"]
            get_missing_key_is_none ["get.missing-is-none", "contains.agrees-with-get"]
            get_batch_agrees_with_get [
                "get-batch.agrees-with-get", "get-batch-each.agrees-with-get-batch",
                "get-if-ready.agrees-with-get"
            ]
            keys_follow_first_put_order [
                "keys.first-put-order", "len.counts-distinct-keys", "put.visible-at-once"
            ]
            reopen_after_flush_keeps_samples [
                "schema.survives-reopen", "finalize.commits", "get.returns-what-was-put"
            ]
            reopen_after_finalize_keeps_samples [
                "schema.survives-reopen", "finalize.commits", "get.returns-what-was-put"
            ]
            put_after_finalize_is_rejected [
                "put.after-finalize-is-finalized", "finalize.commits",
                "capabilities.declared-works"
            ]
            duplicate_key_follows_overwrite_capability [
                "put.existing-key-follows-overwrite", "put.visible-at-once",
                "len.counts-distinct-keys", "errors.unsupported-names-backend"
            ]
            schema_violation_writes_nothing ["put.schema-mismatch-writes-nothing"]
            read_only_handle_rejects_writes [
                "put.read-only-is-unsupported", "errors.unsupported-names-backend"
            ]
            create_over_existing_cache_is_rejected ["create.existing-is-already-exists"]
            open_missing_cache_is_not_found ["open.missing-is-not-found"]
            resume_follows_capability [
                "capabilities.declared-works", "capabilities.undeclared-unsupported",
                "errors.unsupported-names-backend"
            ]
            zero_copy_get_follows_capability [
                "capabilities.declared-works", "get.returns-what-was-put"
            ]
            validate_clean_cache_reports_no_problem ["validate.clean-cache-is-clean"]
            validate_never_writes ["validate.never-writes"]
            flipped_byte_is_detected [
                "get.corruption-is-an-error", "validate.reports-what-get-detects"
            ]
            truncated_file_is_detected [
                "get.corruption-is-an-error", "validate.reports-what-get-detects"
            ]
            deleted_file_is_detected [
                "get.corruption-is-an-error", "validate.reports-what-get-detects"
            ]
            stray_files_are_ignored ["open.ignores-stray-files"]
            recognize_finds_own_caches ["recognize.own-caches", "recognize.never-writes"]
            recognize_follows_the_marker [
                "recognize.marker-decides", "recognize.unreadable-marker-is-error",
                "recognize.never-writes"
            ]
            second_writer_is_refused [
                "create.takes-the-lock", "open.append-takes-the-lock",
                "open.read-only-takes-no-lock", "open.concurrent-writers-keep-every-put"
            ]
            concurrent_readers_see_identical_samples ["capabilities.declared-works"]
            read_only_handle_outlives_the_writers_finalize [
                "open.read-only-outlives-finalize", "open.read-only-takes-no-lock"
            ]
            crash_loses_no_flushed_sample ["flush.crash-keeps-flushed"]
            crash_during_finalize_leaves_resumable_or_complete [
                "finalize.crash-leaves-resumable-or-complete"
            ]
            failed_flush_poisons_the_handle [
                "flush.failure-poisons", "put.not-durable-is-error", "flush.crash-keeps-flushed"
            ]
            power_loss_keeps_every_flushed_sample [
                "flush.crash-keeps-flushed", "flush.power-loss-never-torn"
            ]
            power_loss_during_finalize_leaves_resumable_or_complete [
                "finalize.crash-leaves-resumable-or-complete"
            ]
            io_errors_are_reported_and_lose_no_flushed_sample [
                "flush.io-failure-is-error", "flush.failure-poisons", "put.not-durable-is-error",
                "flush.crash-keeps-flushed"
            ]
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __case_table {
    (() $($case:ident [$($clause:literal),* $(,)?])*) => {
        &[$($crate::Case {
            name: stringify!($case),
            clauses: &[$($clause),*],
            run: $crate::cases::$case,
        }),*]
    };
}

/// The cases re-run through a doubly boxed backend: every trait method is forwarded by them.
pub const BOXED_SUBSET: &[&str] = &[
    "round_trip_every_dtype",
    "get_missing_key_is_none",
    "get_batch_agrees_with_get",
    "keys_follow_first_put_order",
    "duplicate_key_follows_overwrite_capability",
    "put_after_finalize_is_rejected",
    "reopen_after_flush_keeps_samples",
    "read_only_handle_rejects_writes",
    "validate_clean_cache_reports_no_problem",
    "recognize_finds_own_caches",
];

/// Every case, in the order [`run_all`] runs them.
pub const CASES: &[Case] = __with_case_list!(__case_table!);

/// The fault injector argument of [`backend_conformance!`], boxed: the one given, else the
/// built-in [`injector::Faultinject`].
#[doc(hidden)]
#[macro_export]
macro_rules! __faults {
    () => {
        ::core::option::Option::Some(::std::boxed::Box::new($crate::injector::Faultinject)
            as ::std::boxed::Box<dyn $crate::FaultInjector>)
    };
    ($faults:expr) => {
        ::core::option::Option::Some(
            ::std::boxed::Box::new($faults) as ::std::boxed::Box<dyn $crate::FaultInjector>
        )
    };
}

/// The storage argument of [`backend_conformance!`], boxed: the one given, else
/// [`storage::LocalFiles`].
#[doc(hidden)]
#[macro_export]
macro_rules! __storage {
    () => {
        ::std::boxed::Box::new($crate::storage::LocalFiles)
            as ::std::boxed::Box<dyn $crate::storage::CacheStorage>
    };
    ($storage:expr) => {
        ::std::boxed::Box::new($storage) as ::std::boxed::Box<dyn $crate::storage::CacheStorage>
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __case_tests {
    ((($factory:expr) ($($faults:expr)?) ($($storage:expr)?))
     $($case:ident [$($clause:literal),* $(,)?])*) => {
        $(
            #[test]
            fn $case() {
                __stowage_conformance_case($crate::Case {
                    name: stringify!($case),
                    clauses: &[$($clause),*],
                    run: $crate::cases::$case,
                });
            }
        )*

        /// Runs one case against the factory (with the fault injector, on the storage) given
        /// to `backend_conformance!`, each evaluated afresh.
        fn __stowage_conformance_case(case: $crate::Case) {
            let faults = $crate::__faults!($($faults)?);
            let storage = $crate::__storage!($($storage)?);
            $crate::run_case_as_test_on(
                &$factory,
                &*storage,
                faults.as_deref(),
                case,
                module_path!(),
            );
        }

        /// Runs the lifecycle cases once more with each backend wrapped in a second `Box`, so the
        /// forwarding `impl Backend for Box<B>` is exercised as well as `Box<dyn Backend>`.
        #[test]
        fn lifecycle_cases_through_boxed_backend() {
            let storage = $crate::__storage!($($storage)?);
            let report = $crate::run_subset_on(
                &$crate::BoxedFactory(&$factory),
                &*storage,
                $crate::BOXED_SUBSET,
            );
            eprintln!("{report}");
            assert!(report.is_success(), "{report}");
        }
    };
}

/// Generates one `#[test]` per conformance case for the factory expression `$factory` (evaluated
/// afresh in each test), plus one test that re-runs the [`BOXED_SUBSET`] through a doubly boxed
/// backend.
///
/// The cases that kill a writer or make its calls fail run it in a child process (a copy of the
/// test executable) under the `LD_PRELOAD` interposers this crate builds: the power-loss model
/// ([`durable_image`]) and the `ENOSPC`/`EIO` injector ([`injector`]). The failed-flush case
/// takes its [`FaultInjector`] from `faults = ...` (evaluated afresh in each test) when given,
/// else uses the built-in [`injector::Faultinject`]. Where the interposers cannot be built
/// (they need Linux), those cases report SKIPPED with the reason.
///
/// The cases reach a cache's objects (to corrupt copies, plant stray files, watch for writes)
/// through the [`CacheStorage`] given as `storage = ...` (evaluated afresh in each test), else
/// [`LocalFiles`]. A storage that is not local files skips the power-loss and I/O-error cases;
/// one that another process cannot see skips the crash and failed-flush cases.
///
/// ```text
/// stowage_conformance::backend_conformance!(stowage_npy::NpyFactory::default());
/// stowage_conformance::backend_conformance!(my_backend::MyFactory, faults = my_injector());
/// stowage_conformance::backend_conformance!(my_backend::mapped(), storage = my_storage());
/// stowage_conformance::backend_conformance!(my_backend::mapped(), faults = f(), storage = s());
/// ```
#[macro_export]
macro_rules! backend_conformance {
    ($factory:expr $(,)?) => {
        $crate::__with_case_list!(__case_tests!($factory)()());
    };
    ($factory:expr, faults = $faults:expr $(,)?) => {
        $crate::__with_case_list!(__case_tests!($factory)($faults)());
    };
    ($factory:expr, storage = $storage:expr $(,)?) => {
        $crate::__with_case_list!(__case_tests!($factory)()($storage));
    };
    ($factory:expr, faults = $faults:expr, storage = $storage:expr $(,)?) => {
        $crate::__with_case_list!(__case_tests!($factory)($faults)($storage));
    };
    ($factory:expr, storage = $storage:expr, faults = $faults:expr $(,)?) => {
        $crate::__with_case_list!(__case_tests!($factory)($faults)($storage));
    };
}
