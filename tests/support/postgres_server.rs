//! A private PostgreSQL server for crash tests: its own data directory and port,
//! started with `pg_ctl`, and stopped with `pg_ctl stop -m immediate`, which is a
//! crash for the database (no shutdown checkpoint; the next start replays the WAL).
//!
//! Needs `initdb` and `pg_ctl` on the PATH (Debian's `postgresql` package puts
//! them in `/usr/lib/postgresql/<version>/bin`). PostgreSQL refuses to run as
//! root, so under root the server runs as the `postgres` user, which owns the
//! data directory.

use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

/// One PostgreSQL server with its data in a temporary directory, stopped
/// immediately when dropped.
pub(crate) struct PostgresServer {
    dir: tempfile::TempDir,
    port: u16,
    programs: Programs,
}

/// How PostgreSQL's programs are run for one server: as which user, and where
/// the server's log is (shown when a program fails).
#[derive(Clone)]
struct Programs {
    log: PathBuf,
    /// The user and group to run as, when this process is root.
    run_as: Option<(u32, u32)>,
}

impl Programs {
    fn command(&self, program: &str, args: &[&str]) -> Command {
        let mut command = Command::new(program);
        command.args(args);
        if let Some((uid, gid)) = self.run_as {
            command.uid(uid).gid(gid);
        }
        command
    }

    /// Runs `program` and asserts it succeeded.
    fn run(&self, program: &str, args: &[&str]) {
        let out = self.command(program, args).output().unwrap();
        assert!(
            out.status.success(),
            "{program} {args:?} failed: {}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(&self.log).unwrap_or_default(),
        );
    }

    /// Runs `program` on a blocking thread (`pg_ctl -w` waits for the server).
    async fn run_blocking(&self, program: &'static str, args: Vec<String>) {
        let programs = self.clone();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            programs.run(program, &args);
        })
        .await
        .unwrap();
    }
}

/// A user's id or group id, from `id`.
fn id_of(flag: &str, user: &str) -> u32 {
    let out = Command::new("id").args([flag, user]).output().unwrap();
    assert!(
        out.status.success(),
        "no user `{user}` to run PostgreSQL as"
    );
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

impl PostgresServer {
    /// Initializes a data directory (trust authentication, user `postgres`) and
    /// starts the server on a free port.
    pub(crate) async fn start() -> Self {
        Self::start_with(None).await
    }

    /// Like [`Self::start`], but the server speaks TLS with `certificate` and
    /// `key` (PEM) and refuses every connection that does not.
    pub(crate) async fn start_tls_only(certificate: &str, key: &str) -> Self {
        Self::start_with(Some((certificate, key))).await
    }

    async fn start_with(tls: Option<(&str, &str)>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::metadata("/proc/self").unwrap().uid() == 0;
        let run_as = root.then(|| (id_of("-u", "postgres"), id_of("-g", "postgres")));
        if let Some((uid, gid)) = run_as {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).unwrap();
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let programs = Programs {
            log: dir.path().join("server.log"),
            run_as,
        };
        let server = Self {
            dir,
            port,
            programs,
        };
        let data = server.data();
        let initdb = [
            "-D",
            &data,
            "-U",
            "postgres",
            "-A",
            "trust",
            "--no-sync",
            "-E",
            "UTF8",
        ];
        server
            .programs
            .run_blocking("initdb", initdb.map(str::to_owned).to_vec())
            .await;
        if let Some((certificate, key)) = tls {
            server.require_tls(certificate, key);
        }
        server.start_again().await;
        server
    }

    /// Installs the server's certificate and key, turns TLS on and lets only
    /// TLS connections in.
    fn require_tls(&self, certificate: &str, key: &str) {
        let data = self.dir.path().join("data");
        for (name, content) in [("server.crt", certificate), ("server.key", key)] {
            let path = data.join(name);
            std::fs::write(&path, content).unwrap();
            // PostgreSQL refuses a key others can read.
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .unwrap();
            if let Some((uid, gid)) = self.programs.run_as {
                std::os::unix::fs::chown(&path, Some(uid), Some(gid)).unwrap();
            }
        }
        let mut conf = std::fs::OpenOptions::new()
            .append(true)
            .open(data.join("postgresql.conf"))
            .unwrap();
        std::io::Write::write_all(
            &mut conf,
            b"\nssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n",
        )
        .unwrap();
        std::fs::write(
            data.join("pg_hba.conf"),
            "hostssl all all 127.0.0.1/32 trust\nhostnossl all all 0.0.0.0/0 reject\n",
        )
        .unwrap();
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    /// The server's port.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// A URL of the server's `postgres` database.
    pub(crate) fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Starts the server (again) on its data and port and waits until it
    /// accepts connections; after [`Self::crash`] this replays the WAL first.
    /// Durability settings stay at PostgreSQL's defaults (`fsync`,
    /// `synchronous_commit` on): a crash test means nothing without them.
    pub(crate) async fn start_again(&self) {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories=''",
            self.port
        );
        let log = self.programs.log.display().to_string();
        let args = [
            "-D",
            &self.data(),
            "-l",
            &log,
            "-o",
            &options,
            "-w",
            "-t",
            "60",
            "start",
        ];
        self.programs
            .run_blocking("pg_ctl", args.map(str::to_owned).to_vec())
            .await;
    }

    /// Stops the server as an operator's restart does (`pg_ctl stop -m fast`:
    /// sessions are ended with `FATAL`, a shutdown checkpoint is written).
    pub(crate) async fn stop_fast(&self) {
        let args = ["-D", &self.data(), "-m", "fast", "-w", "stop"];
        self.programs
            .run_blocking("pg_ctl", args.map(str::to_owned).to_vec())
            .await;
    }

    /// Stops the server at once, as a crash would (`pg_ctl stop -m immediate`).
    pub(crate) async fn crash(&self) {
        let args = ["-D", &self.data(), "-m", "immediate", "-w", "stop"];
        self.programs
            .run_blocking("pg_ctl", args.map(str::to_owned).to_vec())
            .await;
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        // Stopped whether or not it runs; nothing to report if it was down.
        let data = self.data();
        let _ = self
            .programs
            .command("pg_ctl", &["-D", &data, "-m", "immediate", "stop"])
            .output();
    }
}
