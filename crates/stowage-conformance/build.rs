//! Builds the suite's two `LD_PRELOAD` interposers into shared libraries beside the build's other
//! outputs, and tells the crate where each is through a compile-time environment variable (empty
//! where it cannot be built, on every target but Linux or without a C compiler: the cases that
//! need it then report SKIPPED, naming the reason):
//!
//! - `faultfs/faultfs.c` (`STOWAGE_FAULTFS_LIBRARY`): the durable image of the power-loss cases
//!   ([`durable_image`](src/durable_image.rs)), where a failed fsync also drops the pages it could
//!   not write;
//! - `faultinject/faultinject.c` (`STOWAGE_FAULTINJECT_LIBRARY`): the ENOSPC and EIO failures of
//!   the failed-flush and I/O-error cases ([`injector`](src/injector.rs)), and the EMFILE and
//!   metadata failures stowage-reliability's resource-fault campaign adds (writes, fsyncs,
//!   ftruncates, fallocates, renames, mkdirs, creating opens).
//!
//! They are C because they must replace libc's `write`, `fsync`, `rename` and friends in every
//! library of the child process, libhdf5 included, which only a preloaded shared object can do;
//! the `cc` crate finds the same compiler the rest of the build (zstd, libhdf5's bindings) uses.

fn main() {
    build_preload("faultfs/faultfs.c", "libstowage_faultfs.so", "STOWAGE_FAULTFS_LIBRARY");
    build_preload(
        "faultinject/faultinject.c",
        "libstowage_faultinject.so",
        "STOWAGE_FAULTINJECT_LIBRARY",
    );
}

/// Compiles `source` into the shared library `name` in `OUT_DIR` and sets `variable` to its path
/// (or to the empty string when it cannot be built).
fn build_preload(source: &str, name: &str, variable: &str) {
    println!("cargo:rerun-if-changed={source}");
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let library = out_dir.join(name);
    let built = target_os == "linux"
        && {
            let compiler = cc::Build::new().cargo_metadata(false).get_compiler();
            let status = compiler
                .to_command()
                .args(["-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-o"])
                .arg(&library)
                .arg(source)
                .arg("-ldl")
                .arg("-lpthread")
                .status();
            match status {
                Ok(status) if status.success() => true,
                Ok(status) => {
                    println!(
                        "cargo:warning=building {source} failed ({status}): the cases that need it report SKIPPED"
                    );
                    false
                }
                Err(e) => {
                    println!("cargo:warning=cannot run the C compiler for {source}: {e}");
                    false
                }
            }
        };
    let path = if built { library.display().to_string() } else { String::new() };
    println!("cargo:rustc-env={variable}={path}");
}
