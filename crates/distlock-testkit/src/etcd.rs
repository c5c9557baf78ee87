//! etcd: one member on free loopback ports ([`EtcdServer`]), the options and command line it
//! shares with a cluster's members, the readiness and status checks over etcd's plain-HTTP
//! endpoints, and [`etcdctl`].

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use tempfile::TempDir;

use crate::port::{free_port, retry_if_port_taken};
use crate::probe::{self, loopback};
use crate::process::{delegate_process_controls, find_program, ProcessSpec};
use crate::{temp_dir, HarnessError, ServerProcess};

/// How long `start`/`restart` wait for `GET /health` (for a cluster member: to see a leader).
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound of each step of one HTTP exchange: etcd answers `/health` only after a read through
/// raft, which it bounds by one second itself.
const HTTP_TIMEOUT: Duration = Duration::from_secs(2);
/// The Debian package of the `etcd` binary.
const SERVER_PACKAGE: &str = "etcd-server";
/// The Debian package of `etcdctl`.
const CLIENT_PACKAGE: &str = "etcd-client";

/// Options for [`EtcdServer::start_with`] and
/// [`EtcdCluster::start_with`](crate::EtcdCluster::start_with).
///
/// Unlike the other servers' options there is no `clock`: etcd is a Go program, which reads
/// the time through the vDSO rather than libc, so libfaketime (what
/// [`StoreClock`](crate::StoreClock) preloads) leaves its clock untouched.
#[derive(Debug, Clone)]
pub struct EtcdOptions {
    /// `--heartbeat-interval` in ms. Default 100.
    pub heartbeat_interval_ms: u32,
    /// `--election-timeout` in ms: how long a follower waits without word from its leader
    /// before it stands for election. Default 1000 (ten heartbeats, so a loaded machine's
    /// late heartbeat does not depose a live leader).
    pub election_timeout_ms: u32,
    /// `--pre-vote`: a member that lost touch with its leader asks whether it could win
    /// before it starts an election, so a member resumed after a pause or a partition does
    /// not depose a live leader (etcd 3.5's default; 3.4 defaults to off). Default on.
    pub pre_vote: bool,
    /// A cluster only: put a [`FaultProxy`](crate::FaultProxy) on every link between two
    /// members, so that [`EtcdCluster::isolate`](crate::EtcdCluster::isolate),
    /// [`split`](crate::EtcdCluster::split) and
    /// [`cut_one_way`](crate::EtcdCluster::cut_one_way) can partition them. Default off.
    pub peer_links: bool,
    /// Extra command-line arguments, e.g. `["--auto-compaction-retention", "1"]`.
    pub extra_args: Vec<String>,
    /// The `etcd` executable; a bare name is looked up in `PATH`. Default: `etcd`.
    pub binary: Option<PathBuf>,
    /// Also serve clients over TLS, on a port of its own ([`EtcdServer::tls_port`]), with
    /// this certificate. Single members only. Default: none (plain HTTP/2 only).
    pub client_tls: Option<EtcdTls>,
}

/// A server certificate and its key, PEM files, for [`EtcdOptions::client_tls`].
#[derive(Debug, Clone)]
pub struct EtcdTls {
    /// The certificate (chain), `--cert-file`.
    pub cert_file: PathBuf,
    /// Its private key, `--key-file`.
    pub key_file: PathBuf,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        EtcdOptions {
            heartbeat_interval_ms: 100,
            election_timeout_ms: 1000,
            pre_vote: true,
            peer_links: false,
            extra_args: Vec::new(),
            binary: None,
            client_tls: None,
        }
    }
}

/// One etcd member's name, ports and place in its cluster's configuration.
#[derive(Debug, Clone)]
pub(crate) struct Member {
    pub(crate) name: String,
    pub(crate) client_port: u16,
    pub(crate) peer_port: u16,
    /// The peer port the member advertises (and the others dial): its own, or a front that
    /// routes each caller through a link of its own (see `EtcdOptions::peer_links`).
    pub(crate) advertised_peer_port: u16,
    /// The TLS client port, if the member serves clients over TLS too.
    pub(crate) tls_port: Option<u16>,
}

impl Member {
    /// A member with fresh free ports.
    pub(crate) fn with_free_ports(name: String) -> Result<Self, HarnessError> {
        let peer_port = free_port()?;
        Ok(Member {
            name,
            client_port: free_port()?,
            peer_port,
            advertised_peer_port: peer_port,
            tls_port: None,
        })
    }

    /// `NAME=http://127.0.0.1:PEER`, one entry of `--initial-cluster`.
    fn initial_cluster_entry(&self) -> String {
        format!("{}=http://127.0.0.1:{}", self.name, self.advertised_peer_port)
    }
}

/// The resolved `etcd` executable.
pub(crate) fn etcd_binary(options: &EtcdOptions) -> Result<PathBuf, HarnessError> {
    let binary = options.binary.clone().unwrap_or_else(|| PathBuf::from("etcd"));
    find_program(&binary, SERVER_PACKAGE)
}

/// The process spec of `member` of the cluster `members` (one member: itself), its data in
/// `dir/data`, its log in `dir/server.log`. The same command line serves every restart: etcd
/// ignores the `--initial-*` flags once its data directory holds a member.
pub(crate) fn member_spec(
    binary: &Path,
    options: &EtcdOptions,
    dir: &Path,
    member: &Member,
    members: &[Member],
    cluster_token: &str,
) -> ProcessSpec {
    let mut client_url = format!("http://127.0.0.1:{}", member.client_port);
    if let (Some(port), Some(_)) = (member.tls_port, &options.client_tls) {
        client_url.push_str(&format!(",https://127.0.0.1:{port}"));
    }
    let peer_url = format!("http://127.0.0.1:{}", member.peer_port);
    let advertised_peer_url = format!("http://127.0.0.1:{}", member.advertised_peer_port);
    let initial_cluster = members
        .iter()
        .map(Member::initial_cluster_entry)
        .collect::<Vec<_>>()
        .join(",");
    let mut args: Vec<OsString> = Vec::new();
    let mut flag = |name: &str, value: String| args.extend([name.into(), value.into()]);
    flag("--name", member.name.clone());
    flag("--data-dir", dir.join("data").display().to_string());
    flag("--listen-client-urls", client_url.clone());
    flag("--advertise-client-urls", client_url);
    flag("--listen-peer-urls", peer_url);
    flag("--initial-advertise-peer-urls", advertised_peer_url);
    flag("--initial-cluster", initial_cluster);
    flag("--initial-cluster-state", "new".into());
    flag("--initial-cluster-token", cluster_token.into());
    flag("--heartbeat-interval", options.heartbeat_interval_ms.to_string());
    flag("--election-timeout", options.election_timeout_ms.to_string());
    flag("--logger", "zap".into());
    flag("--log-outputs", "stderr".into());
    if let Some(tls) = &options.client_tls {
        flag("--cert-file", tls.cert_file.display().to_string());
        flag("--key-file", tls.key_file.display().to_string());
    }
    // A Go boolean flag takes its value only after `=`.
    args.push(format!("--pre-vote={}", options.pre_vote).into());
    args.extend(options.extra_args.iter().map(OsString::from));
    let name = if members.len() == 1 {
        format!("etcd on 127.0.0.1:{}", member.client_port)
    } else {
        format!("etcd member {} on 127.0.0.1:{}", member.name, member.client_port)
    };
    let client_port = member.client_port;
    ProcessSpec {
        name,
        program: binary.to_path_buf(),
        args,
        cwd: dir.to_path_buf(),
        log_path: dir.join("server.log"),
        ready_timeout: READY_TIMEOUT,
        probe: Box::new(move || healthy(loopback(client_port))),
        env: Vec::new(),
    }
}

/// A single etcd member owned by one test: serves clients on a free `127.0.0.1` port (plain
/// HTTP/gRPC, no TLS) and listens for peers on another, keeps its data in `data/` and logs to
/// `server.log` in its own temporary directory, and is killed and the directory removed when
/// dropped. Its data survives `kill -9` and [`restart`](Self::restart).
#[derive(Debug)]
pub struct EtcdServer {
    // Field order matters: the process is killed before the directory goes.
    process: ServerProcess,
    port: u16,
    peer_port: u16,
    tls_port: Option<u16>,
    dir: TempDir,
}

impl EtcdServer {
    /// Starts a member with default options; blocks until `GET /health` answers healthy.
    pub fn start() -> Result<Self, HarnessError> {
        Self::start_with(EtcdOptions::default())
    }

    /// Starts a member with `options`; blocks until `GET /health` answers healthy.
    pub fn start_with(options: EtcdOptions) -> Result<Self, HarnessError> {
        let binary = etcd_binary(&options)?;
        retry_if_port_taken(|| {
            let dir = temp_dir("etcd")?;
            let mut member = Member::with_free_ports("etcd".into())?;
            if options.client_tls.is_some() {
                member.tls_port = Some(free_port()?);
            }
            let token = cluster_token(&dir);
            let spec = member_spec(
                &binary,
                &options,
                dir.path(),
                &member,
                std::slice::from_ref(&member),
                &token,
            );
            let process = ServerProcess::start(spec)?;
            Ok(EtcdServer {
                process,
                port: member.client_port,
                peer_port: member.peer_port,
                tls_port: member.tls_port,
                dir,
            })
        })
    }

    /// The client port on `127.0.0.1`.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The peer port on `127.0.0.1`.
    pub fn peer_port(&self) -> u16 {
        self.peer_port
    }

    /// The TLS client port on `127.0.0.1`, if started with [`EtcdOptions::client_tls`].
    pub fn tls_port(&self) -> Option<u16> {
        self.tls_port
    }

    /// `127.0.0.1:PORT`, the client address.
    pub fn addr(&self) -> SocketAddr {
        loopback(self.port)
    }

    /// `etcd://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("etcd://127.0.0.1:{}", self.port)
    }

    /// `http://127.0.0.1:PORT`, the form `etcdctl --endpoints` takes.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The temporary directory (`data/`, `server.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The etcd process and its controls.
    pub fn process(&self) -> &ServerProcess {
        &self.process
    }

    /// The etcd process and its controls, mutably.
    pub fn process_mut(&mut self) -> &mut ServerProcess {
        &mut self.process
    }
}

delegate_process_controls!(EtcdServer);

/// A token no other cluster shares (`--initial-cluster-token`): the temporary directory's
/// name, so members of two tests' clusters never take each other for peers.
pub(crate) fn cluster_token(dir: &TempDir) -> String {
    dir.path().file_name().map_or_else(
        || "distlock-etcd".into(),
        |name| name.to_string_lossy().into_owned(),
    )
}

/// Ready when `GET /health` answers `{"health":"true"}`: the member serves and sees a leader.
fn healthy(addr: SocketAddr) -> Result<(), String> {
    let reply = http(addr, "GET", "/health", "")?;
    if reply.contains(r#""health":"true""#) {
        Ok(())
    } else {
        Err(format!("GET /health answered {reply:?}"))
    }
}

/// What a member says of itself and its leader (`POST /v3/maintenance/status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EtcdStatus {
    /// The member's own id.
    pub member_id: u64,
    /// The id of the member it follows (its own when it leads); 0 when it knows no leader.
    pub leader: u64,
    /// The raft term it is in.
    pub raft_term: u64,
}

impl EtcdStatus {
    /// True when the member reports itself as the leader.
    pub fn is_leader(&self) -> bool {
        self.leader != 0 && self.leader == self.member_id
    }
}

/// The member's status through its client address (`POST /v3/maintenance/status`, the gRPC
/// gateway's JSON); an error when it does not answer within a couple of seconds.
pub fn etcd_status(addr: SocketAddr) -> Result<EtcdStatus, String> {
    let reply = http(addr, "POST", "/v3/maintenance/status", "{}")?;
    let field =
        |name: &str| json_uint(&reply, name).ok_or_else(|| format!("no {name:?} in the status {reply:?}"));
    Ok(EtcdStatus {
        member_id: field("member_id")?,
        leader: json_uint(&reply, "leader").unwrap_or(0),
        raft_term: field("raft_term")?,
    })
}

/// The unsigned integer `"name":"123"` (how the gateway writes 64-bit integers) or
/// `"name":123` in `json`; `None` when absent. The gateway leaves out zero values.
fn json_uint(json: &str, name: &str) -> Option<u64> {
    let key = format!("\"{name}\":");
    let start = json.find(&key)? + key.len();
    let digits: String = json[start..]
        .trim_start_matches([' ', '"'])
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// One HTTP/1.1 request over a fresh connection (`Connection: close`); the body of a `200`
/// reply, or why not.
fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> Result<String, String> {
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let reply = probe::exchange(addr, request.as_bytes(), |_| false, HTTP_TIMEOUT)
        .map_err(|e| format!("{method} {path}: {e}"))?;
    let reply = String::from_utf8_lossy(&reply);
    let (head, body) = reply
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{method} {path} answered {reply:?}"))?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!("{method} {path} answered {reply:?}"));
    }
    Ok(body.to_owned())
}

/// Runs `etcdctl --endpoints ENDPOINTS ARGS...` (API v3, bounded dial and command timeouts)
/// and returns its standard output; an error with its standard error when it fails, and one
/// naming the package and `scripts/install-test-deps` when `etcdctl` is missing.
pub fn etcdctl(endpoints: &str, args: &[&str]) -> Result<String, HarnessError> {
    let program = find_program(Path::new("etcdctl"), CLIENT_PACKAGE)?;
    let output = Command::new(&program)
        .env("ETCDCTL_API", "3")
        .args([
            "--endpoints",
            endpoints,
            "--dial-timeout=2s",
            "--command-timeout=5s",
        ])
        .args(args)
        .output()
        .map_err(|e| HarnessError::io(format!("running {}", program.display()), e))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(HarnessError::Other(format!(
            "etcdctl --endpoints {endpoints} {} failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::json_uint;

    #[test]
    fn reads_the_gateways_integers() {
        let status = r#"{"header":{"cluster_id":"1","member_id":"12345678901234567890","raft_term":"3"},"leader":"42","raftTerm":3}"#;
        assert_eq!(json_uint(status, "member_id"), Some(12_345_678_901_234_567_890));
        assert_eq!(json_uint(status, "leader"), Some(42));
        assert_eq!(json_uint(status, "raftTerm"), Some(3));
        assert_eq!(json_uint(status, "raft_index"), None);
    }
}
