//! Throwaway PostgreSQL clusters for the tests: `initdb` in a temporary folder, the server on a
//! free loopback port with `fsync` and `synchronous_commit` on, stopped and removed when the
//! handle drops — or, if the test process dies first, by a guard process that notices its
//! pipe close.
//!
//! PostgreSQL refuses to run as root, so when the tests run as root (as CI does) every server
//! command runs as the `postgres` user the Debian packages create (`runuser -u postgres`). The
//! binaries are looked for under `/usr/lib/postgresql/*/bin` (the newest version of 15 or
//! later), or in `RESEARCH_LEDGER_PG_BIN` when it is set.

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The oldest major version the ledger's backend supports.
pub const MAJOR_MIN: u32 = 15;

/// Why a cluster could not be made or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// No PostgreSQL binaries of version 15 or later were found.
    #[error(
        "no PostgreSQL {MAJOR_MIN}+ binaries under /usr/lib/postgresql/*/bin (install Debian's postgresql)"
    )]
    NotInstalled,
    /// A command could not be started.
    #[error("{command}: {source}")]
    Spawn {
        /// What was run.
        command: String,
        /// Why it did not start.
        source: std::io::Error,
    },
    /// A command ran and failed.
    #[error("{command} failed: {output}")]
    Failed {
        /// What was run.
        command: String,
        /// What it printed.
        output: String,
    },
    /// A file operation on the cluster's folder failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Where the newest PostgreSQL binaries of version 15 or later are, if any.
pub fn bin_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("RESEARCH_LEDGER_PG_BIN") {
        let dir = PathBuf::from(dir);
        return dir.join("initdb").exists().then_some(dir);
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|entry| {
            let major: u32 = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            (major >= MAJOR_MIN && bin.join("initdb").exists()).then_some((major, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

/// True when the tests must have PostgreSQL (`RESEARCH_LEDGER_REQUIRE_POSTGRES` is set, as
/// `scripts/test` sets it once it installed the packages): a test that finds no binaries then
/// fails instead of skipping.
pub fn required() -> bool {
    std::env::var_os("RESEARCH_LEDGER_REQUIRE_POSTGRES").is_some()
}

/// A fresh database on the shared cluster for a test, with its URL, or `None` when PostgreSQL
/// is absent and allowed to be ([`cluster_or_skip`]).
pub fn database_or_skip(test: &str) -> Option<(&'static PgCluster, String)> {
    let cluster = cluster_or_skip(test)?;
    match cluster.create_database() {
        Ok(url) => Some((cluster, url)),
        Err(e) => panic!("{test}: a database for the test: {e}"),
    }
}

/// A cluster for a test, or `None` (with a note on stderr) when PostgreSQL is not installed and
/// not required. Panics when it is required and missing, or when the cluster does not start.
pub fn cluster_or_skip(test: &str) -> Option<&'static PgCluster> {
    match PgCluster::shared() {
        Ok(cluster) => Some(cluster),
        Err(ClusterError::NotInstalled) if !required() => {
            eprintln!("{test}: skipped, {}", ClusterError::NotInstalled);
            None
        }
        Err(e) => panic!("{test}: {e}"),
    }
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// A command that runs as the cluster's owner: `postgres` when we are root, ourselves otherwise.
fn as_owner(program: &Path) -> Command {
    if running_as_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

fn run(mut command: Command) -> Result<Output, ClusterError> {
    let text = format!("{command:?}");
    let output = command.output().map_err(|source| ClusterError::Spawn {
        command: text.clone(),
        source,
    })?;
    if output.status.success() {
        Ok(output)
    } else {
        Err(ClusterError::Failed {
            command: text,
            output: format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        })
    }
}

fn free_port() -> Result<u16, ClusterError> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A running throwaway cluster. Dropping it stops the server at once and removes its folder.
#[derive(Debug)]
pub struct PgCluster {
    bin: PathBuf,
    /// The folder holding the data directory, the socket and the server's log.
    root: PathBuf,
    port: u16,
    /// The guard's stdin: closing it (on drop, or when this process dies) makes the guard stop
    /// the server and remove the folder.
    guard_stdin: Option<ChildStdin>,
    guard: Option<Child>,
    next_db: AtomicU64,
}

impl PgCluster {
    /// Starts a cluster with the durable settings (`fsync`, `synchronous_commit` on).
    pub fn start() -> Result<PgCluster, ClusterError> {
        PgCluster::start_with(&[])
    }

    /// Starts a cluster with extra server settings (`name`, `value`) after the durable ones,
    /// so a test may override them.
    pub fn start_with(settings: &[(&str, &str)]) -> Result<PgCluster, ClusterError> {
        PgCluster::start_prepared(settings, |_| Ok(()))
    }

    /// Starts a cluster that takes TLS connections only: `ssl` on with the given server
    /// certificate and key (PEM), and `pg_hba.conf` allowing TCP only as `hostssl` (a plain
    /// connection is refused by the server).
    pub fn start_tls(cert_pem: &str, key_pem: &str) -> Result<PgCluster, ClusterError> {
        PgCluster::start_prepared(&[("ssl", "on")], |data| {
            std::fs::write(data.join("server.crt"), cert_pem)?;
            std::fs::write(data.join("server.key"), key_pem)?;
            std::fs::write(
                data.join("pg_hba.conf"),
                "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
            )?;
            let mut chmod = Command::new("chmod");
            chmod.arg("600").arg(data.join("server.key"));
            run(chmod)?;
            if running_as_root() {
                let mut chown = Command::new("chown");
                chown
                    .arg("postgres:postgres")
                    .arg(data.join("server.crt"))
                    .arg(data.join("server.key"))
                    .arg(data.join("pg_hba.conf"));
                run(chown)?;
            }
            Ok(())
        })
    }

    /// Starts a cluster after `prepare` changed its data directory (made by `initdb`).
    fn start_prepared(
        settings: &[(&str, &str)],
        prepare: impl FnOnce(&Path) -> Result<(), ClusterError>,
    ) -> Result<PgCluster, ClusterError> {
        let bin = bin_dir().ok_or(ClusterError::NotInstalled)?;
        let root = tempfile::Builder::new().prefix("rl-pg-").tempdir()?.keep();
        if running_as_root() {
            let mut chown = Command::new("chown");
            chown.arg("postgres:postgres").arg(&root);
            run(chown)?;
        }
        let data = root.join("data");
        let mut initdb = as_owner(&bin.join("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C"])
            // Only initdb's own final sync of the new files: the server itself runs with fsync.
            .arg("--no-sync");
        if let Err(e) = run(initdb).and_then(|_| prepare(&data)) {
            let _ = std::fs::remove_dir_all(&root);
            return Err(e);
        }
        let mut last = None;
        for _ in 0..5 {
            let port = free_port()?;
            match PgCluster::start_server(&bin, &root, port, settings) {
                Ok(()) => {
                    let mut cluster = PgCluster {
                        bin,
                        root,
                        port,
                        guard_stdin: None,
                        guard: None,
                        next_db: AtomicU64::new(0),
                    };
                    cluster.spawn_guard()?;
                    return Ok(cluster);
                }
                Err(e) => last = Some(e),
            }
        }
        let _ = std::fs::remove_dir_all(&root);
        Err(last.unwrap_or(ClusterError::NotInstalled))
    }

    fn start_server(
        bin: &Path,
        root: &Path,
        port: u16,
        settings: &[(&str, &str)],
    ) -> Result<(), ClusterError> {
        let mut options = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=on -c synchronous_commit=on \
             -c full_page_writes=on -c max_connections=300",
            root.display()
        );
        for (name, value) in settings {
            options.push_str(&format!(" -c {name}={value}"));
        }
        let mut pg_ctl = as_owner(&bin.join("pg_ctl"));
        pg_ctl
            .arg("-D")
            .arg(root.join("data"))
            .arg("-l")
            .arg(root.join("server.log"))
            .args(["-o", &options, "-w", "-t", "60", "start"]);
        run(pg_ctl).map(|_| ())
    }

    /// The process that cleans up after a test process that died without dropping the
    /// cluster: it waits for its stdin to close, then stops the server and removes the folder.
    fn spawn_guard(&mut self) -> Result<(), ClusterError> {
        let stop = format!(
            "{} -D {} -m immediate -w stop",
            self.bin.join("pg_ctl").display(),
            self.data_dir().display()
        );
        let stop = if running_as_root() {
            format!("runuser -u postgres -- {stop}")
        } else {
            stop
        };
        let script = format!(
            "read _ignored; {stop} >/dev/null 2>&1; rm -rf {}",
            self.root.display()
        );
        let mut guard = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| ClusterError::Spawn {
                command: "sh (cluster guard)".into(),
                source,
            })?;
        self.guard_stdin = guard.stdin.take();
        self.guard = Some(guard);
        Ok(())
    }

    /// One cluster for the whole test process, started on first use and cleaned up by its guard
    /// when the process exits.
    pub fn shared() -> Result<&'static PgCluster, ClusterError> {
        static SHARED: OnceLock<Result<PgCluster, String>> = OnceLock::new();
        match SHARED.get_or_init(|| PgCluster::start().map_err(|e| e.to_string())) {
            Ok(cluster) => Ok(cluster),
            Err(_) if bin_dir().is_none() => Err(ClusterError::NotInstalled),
            Err(e) => Err(ClusterError::Failed {
                command: "start the shared cluster".into(),
                output: e.clone(),
            }),
        }
    }

    /// The port the server listens on (on 127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The cluster's data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.root.join("data")
    }

    /// What the server wrote to its log so far.
    pub fn server_log(&self) -> String {
        std::fs::read_to_string(self.root.join("server.log")).unwrap_or_default()
    }

    /// The URL of database `db` as the superuser.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// Creates a database of its own for a caller and returns its URL.
    pub fn create_database(&self) -> Result<String, ClusterError> {
        let n = self.next_db.fetch_add(1, Ordering::Relaxed);
        let name = format!("t{}_{n}", std::process::id());
        self.psql("postgres", &format!("CREATE DATABASE {name}"))?;
        Ok(self.url(&name))
    }

    /// Runs SQL in database `db` with `psql` and returns what it printed (unaligned, tuples
    /// only: one row a line, columns separated by `|`).
    pub fn psql(&self, db: &str, sql: &str) -> Result<String, ClusterError> {
        let mut psql = Command::new(self.bin.join("psql"));
        psql.args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", "postgres", "-d", db, "-c", sql]);
        let output = run(psql)?;
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    }

    /// Runs SQL in the database of `url` (as made by [`PgCluster::create_database`]).
    pub fn psql_url(&self, url: &str, sql: &str) -> Result<String, ClusterError> {
        let db = url.rsplit('/').next().unwrap_or("postgres");
        self.psql(db, sql)
    }

    /// Stops the server at once, as a crash would (`pg_ctl stop -m immediate`): what was
    /// committed survives, as after a power cut with `fsync` on.
    pub fn crash(&self) -> Result<(), ClusterError> {
        let mut pg_ctl = as_owner(&self.bin.join("pg_ctl"));
        pg_ctl
            .arg("-D")
            .arg(self.data_dir())
            .args(["-m", "immediate", "-w", "stop"]);
        run(pg_ctl).map(|_| ())
    }

    /// Starts the server again on the same port after [`PgCluster::crash`].
    pub fn restart(&self) -> Result<(), ClusterError> {
        PgCluster::start_server(&self.bin, &self.root, self.port, &[])
    }

    /// Waits until the server accepts connections, up to `timeout`.
    pub fn wait_ready(&self, timeout: Duration) -> Result<(), ClusterError> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            match self.psql("postgres", "SELECT 1") {
                Ok(_) => return Ok(()),
                Err(e) if std::time::Instant::now() >= deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let _ = self.crash();
        // Closing the pipe lets the guard remove the folder; it is waited for so the folder is
        // gone when the drop returns.
        if let Some(mut stdin) = self.guard_stdin.take() {
            let _ = stdin.write_all(b"\n");
        }
        if let Some(mut guard) = self.guard.take() {
            let _ = guard.wait();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_starts_durable_takes_sql_and_is_gone_after_drop() {
        if bin_dir().is_none() && !required() {
            eprintln!("skipped: {}", ClusterError::NotInstalled);
            return;
        }
        let cluster = PgCluster::start().expect("cluster starts");
        let url = cluster.create_database().expect("database");
        assert!(url.starts_with("postgres://postgres@127.0.0.1:"), "{url}");
        assert_eq!(cluster.psql("postgres", "SHOW fsync").unwrap(), "on");
        assert_eq!(
            cluster.psql("postgres", "SHOW synchronous_commit").unwrap(),
            "on"
        );
        cluster
            .psql_url(&url, "CREATE TABLE t (x int); INSERT INTO t VALUES (7)")
            .unwrap();
        cluster.crash().unwrap();
        cluster.restart().unwrap();
        cluster.wait_ready(Duration::from_secs(30)).unwrap();
        assert_eq!(cluster.psql_url(&url, "SELECT x FROM t").unwrap(), "7");
        let root = cluster.data_dir().parent().unwrap().to_path_buf();
        let port = cluster.port();
        drop(cluster);
        assert!(!root.exists(), "the cluster's folder is removed");
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
            "the server is stopped"
        );
    }

    #[test]
    fn a_dead_test_process_leaves_no_server_behind() {
        // The guard alone (as after a crash of the test process): closing its pipe without the
        // drop's own stop must still stop the server and remove the folder.
        if bin_dir().is_none() && !required() {
            eprintln!("skipped: {}", ClusterError::NotInstalled);
            return;
        }
        let mut cluster = PgCluster::start().expect("cluster starts");
        let root = cluster.data_dir().parent().unwrap().to_path_buf();
        let port = cluster.port();
        drop(cluster.guard_stdin.take());
        let mut guard = cluster.guard.take().unwrap();
        guard.wait().unwrap();
        assert!(!root.exists(), "the guard removed the folder");
        assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
        std::mem::forget(cluster);
    }
}
