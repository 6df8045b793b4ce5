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
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
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
        let python = python_with(test, &["moto.server", "boto3"])?;
        let mut child = Command::new(python)
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

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
