//! A real S3 server for the object-storage tests: moto's server (the PyPI package
//! `moto[server]`, which `cargo xtask test` installs), started on 127.0.0.1 on a port the OS
//! picks, and stopped when the fixture is dropped.
//!
//! ```no_run
//! let Some(moto) = stowage_test_support::moto::MotoServer::start("doc example") else { return };
//! moto.create_bucket("cache-bucket");
//! let options = moto.s3_options(); // aws_endpoint, aws_allow_http, credentials, region
//! assert!(options.iter().any(|(key, value)| *key == "aws_endpoint" && value == moto.endpoint()));
//! ```

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{OnceLock, mpsc};
use std::time::Duration;

use crate::python::{python_with, run_script};

/// How long the server may take to say which port it listens on.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The credentials every request is signed with (moto accepts any).
const KEY_ID: &str = "stowage-test";
const SECRET: &str = "stowage-test-secret";
const REGION: &str = "us-east-1";

/// A running moto S3 server; dropping it stops the server.
#[derive(Debug)]
pub struct MotoServer {
    child: Child,
    endpoint: String,
    python: &'static str,
}

impl MotoServer {
    /// Starts a server for `test`. When python3 cannot import `moto.server` and `boto3`, reports
    /// the skip and returns `None`, or panics when `STOWAGE_REQUIRE_PYTHON=1` (as
    /// [`python_with`] does).
    ///
    /// # Panics
    /// When the server does not start, or does not name its port within a minute.
    pub fn start(test: &str) -> Option<MotoServer> {
        MotoServer::spawn(test, python_with(test, &["moto.server", "boto3"])?, false)
    }

    /// The server every test of this process shares, started on first use, and seen by the
    /// process's children too (the conformance suite's writer processes): a child finds its
    /// parent's server through a file named after the parent's process id. The server dies with
    /// the process that started it. `None` as [`MotoServer::start`].
    pub fn shared(test: &str) -> Option<&'static MotoServer> {
        static SHARED: OnceLock<Option<MotoServer>> = OnceLock::new();
        SHARED
            .get_or_init(|| {
                let python = python_with(test, &["moto.server", "boto3"])?;
                // SAFETY: getppid has no preconditions.
                let parent = unsafe { libc::getppid() };
                let inherited = std::fs::read_to_string(shared_file(parent as u32))
                    .ok()
                    .map(|text| text.trim().to_owned())
                    .filter(|endpoint| listening(endpoint));
                if let Some(endpoint) = inherited {
                    // The parent's server (a stale file of a dead process names no listener):
                    // this process must not stop it.
                    let child = Command::new("true").spawn().expect("`true` runs");
                    return Some(MotoServer { child, endpoint, python });
                }
                // Started by a thread that lives as long as the process, so that the server's
                // parent-death signal fires when the process ends, not when a test thread does.
                let (tx, rx) = mpsc::channel();
                let test = test.to_owned();
                std::thread::spawn(move || {
                    let _ = tx.send(MotoServer::spawn(&test, python, true));
                    loop {
                        std::thread::park();
                    }
                });
                let server = rx.recv().expect("the starter thread answers")?;
                let file = shared_file(std::process::id());
                std::fs::write(&file, &server.endpoint)
                    .unwrap_or_else(|e| panic!("writing {}: {e}", file.display()));
                Some(server)
            })
            .as_ref()
    }

    /// Starts the server with `python`; with `die_with_parent`, the server is killed when the
    /// thread that started it ends.
    fn spawn(test: &str, python: &'static str, die_with_parent: bool) -> Option<MotoServer> {
        let mut command = Command::new(python);
        if die_with_parent {
            // SAFETY: prctl is async-signal-safe; it only sets this child's death signal.
            unsafe {
                command.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    Ok(())
                });
            }
        }
        let mut child = command
            .args(["-m", "moto.server", "-H", "127.0.0.1", "-p", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{test}: could not start `{python} -m moto.server`: {e}"));
        let stderr = child.stderr.take().expect("stderr is piped");
        let (port_tx, port_rx) = mpsc::channel();
        // The server logs every request to stderr: the pipe is drained for its whole life, or a
        // full pipe would stall it.
        std::thread::spawn(move || {
            let mut port_tx = Some(port_tx);
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(tx) = &port_tx
                    && let Some(address) = line.split("Running on ").nth(1)
                {
                    let _ = tx.send(address.trim().to_owned());
                    port_tx = None;
                }
            }
        });
        let endpoint = match port_rx.recv_timeout(START_TIMEOUT) {
            Ok(endpoint) => endpoint,
            Err(_) => {
                let _ = child.kill();
                let status = child.wait();
                panic!(
                    "{test}: moto's server did not say where it listens within {START_TIMEOUT:?} \
                     ({status:?})"
                );
            }
        };
        Some(MotoServer { child, endpoint, python })
    }

    /// The server's URL, `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Creates bucket `name` (through boto3: object_store has no call for it).
    ///
    /// # Panics
    /// When the server refuses.
    pub fn create_bucket(&self, name: &str) {
        let script = format!(
            "import boto3, sys\n\
             s3 = boto3.client('s3', endpoint_url=sys.argv[1], aws_access_key_id='{KEY_ID}', \
             aws_secret_access_key='{SECRET}', region_name='{REGION}')\n\
             s3.create_bucket(Bucket=sys.argv[2])\n\
             print('created')"
        );
        let what = format!("creating bucket {name} on {}", self.endpoint);
        let out = run_script(self.python, &script, &[&self.endpoint, name], b"", &what);
        assert_eq!(out, "created", "{what}");
    }

    /// The object_store configuration that reaches this server: `(key, value)` pairs for
    /// `AmazonS3Builder::with_config` (endpoint, plain HTTP allowed, credentials, region).
    pub fn s3_options(&self) -> Vec<(&'static str, String)> {
        vec![
            ("aws_endpoint", self.endpoint.clone()),
            ("aws_allow_http", "true".to_owned()),
            ("aws_access_key_id", KEY_ID.to_owned()),
            ("aws_secret_access_key", SECRET.to_owned()),
            ("aws_region", REGION.to_owned()),
        ]
    }
}

/// Whether something accepts connections at `endpoint` (`http://host:port`).
fn listening(endpoint: &str) -> bool {
    let address = endpoint.trim_start_matches("http://").trim_end_matches('/');
    std::net::TcpStream::connect(address).is_ok()
}

/// Where process `pid`'s shared server writes its endpoint for its children.
fn shared_file(pid: u32) -> PathBuf {
    std::env::temp_dir().join(format!("stowage-moto-shared-{pid}"))
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
