//! Builds `faultfs/faultfs.c`, the `LD_PRELOAD` interposer of the power-loss trials, into a
//! shared library beside the build's other outputs, and tells the crate where it is through the
//! `STOWAGE_FAULTFS_LIBRARY` environment variable at compile time (empty where it cannot be
//! built: the power-loss trials then report themselves unavailable).
//!
//! It is C because it must replace libc's `fsync`, `rename` and friends in every library of the
//! child process, libhdf5 included, which only a preloaded shared object can do; the `cc` crate
//! finds the same compiler the rest of the build (zstd, libhdf5's bindings) uses.

fn main() {
    let source = "faultfs/faultfs.c";
    println!("cargo:rerun-if-changed={source}");
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let library = out_dir.join("libstowage_faultfs.so");
    let built = target_os == "linux" && {
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
                println!("cargo:warning=building {source} failed ({status}): no power-loss trials");
                false
            }
            Err(e) => {
                println!("cargo:warning=cannot run the C compiler for {source}: {e}");
                false
            }
        }
    };
    let path = if built { library.display().to_string() } else { String::new() };
    println!("cargo:rustc-env=STOWAGE_FAULTFS_LIBRARY={path}");
}
