//! The S3 server a suite that reads object storage runs against: moto's server on loopback,
//! started before the suite's bench and stopped after its peer, so that the bench writes the
//! data and the peer reads the same objects from the same server process.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::prerequisites::{self, PREREQUISITES, PYTHON, Prerequisite};

/// The variable that hands the server's endpoint (`http://127.0.0.1:<port>`) to the bench.
pub const ENDPOINT_VAR: &str = "STOWAGE_BENCH_S3_ENDPOINT";

/// How long the server may take to say where it listens.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A running moto server; dropping it stops it.
#[derive(Debug)]
pub struct S3Server {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub endpoint: String,
}

impl S3Server {
    /// Installs moto's server when missing, starts it on 127.0.0.1 on a port the OS picks and
    /// waits until it names the port.
    pub fn start() -> Result<S3Server, String> {
        let wanted: Vec<Prerequisite> = PREREQUISITES
            .iter()
            .filter(|p| p.package.starts_with("moto[server]"))
            .map(|p| Prerequisite { needed_for: "the benchmark's S3 server", ..*p })
            .collect();
        prerequisites::ensure(&wanted)?;
        let line = format!("{PYTHON} -m moto.server -H 127.0.0.1 -p 0");
        let mut child = Command::new(PYTHON)
            .args(["-m", "moto.server", "-H", "127.0.0.1", "-p", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|error| format!("could not start `{line}`: {error}"))?;
        let stderr = child.stderr.take().expect("stderr is piped");
        let (tx, rx) = mpsc::channel();
        // The server logs every request to stderr: the pipe is drained for its whole life, or a
        // full pipe would stall it.
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(address) = line.split("Running on ").nth(1)
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(address.trim().to_owned());
                }
            }
        });
        match rx.recv_timeout(START_TIMEOUT) {
            Ok(endpoint) => {
                println!("xtask: ==> `{line}`: listening on {endpoint}");
                Ok(S3Server { child, endpoint })
            }
            Err(_) => {
                let _ = child.kill();
                let status = child.wait();
                Err(format!("`{line}` did not say where it listens within 60 s ({status:?})"))
            }
        }
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
