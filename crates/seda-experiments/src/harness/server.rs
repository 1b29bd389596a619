//! Servers under test: Haboob (`seda serve`), nginx and Apache httpd 2.4, each started
//! as a child process on a free loopback port with its configuration, pid and log
//! files in a private temporary directory (never /etc), and stopped with SIGTERM to
//! its process group (SIGKILL after a grace period).

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::ExperimentError;
use procfs::process::Process;

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerKind {
    /// `seda serve --listen ADDR --root DIR --cache-mb N [extra args]`.
    Haboob {
        /// The `seda` binary.
        seda: PathBuf,
        /// Page cache size, MiB.
        cache_mb: u64,
        /// More arguments for `seda serve`.
        extra: Vec<String>,
    },
    /// nginx: `workers` worker processes, sendfile on, access log off.
    Nginx {
        /// worker_processes.
        workers: u32,
        /// More directives for the `http` block (e.g. `open_file_cache ...;`,
        /// `aio threads;`), each a complete directive.
        http_extra: Vec<String>,
        /// `reuseport` on the listener (a listening socket per worker).
        reuseport: bool,
    },
    /// Apache httpd with the prefork MPM and a fixed pool of `workers` processes (the
    /// paper's configuration: 150).
    ApachePrefork {
        /// StartServers = MaxRequestWorkers.
        workers: u32,
    },
    /// Apache httpd with Debian's default event MPM settings.
    ApacheEvent,
    /// nginx as a reverse proxy to `upstream` (keep-alive upstream connections), with
    /// `http` added to the `http` block and `location` to the proxied location: how
    /// an operator sheds load in front of a service today (`limit_req`, `limit_conn`,
    /// upstream `max_conns`).
    NginxProxy {
        /// worker_processes.
        workers: u32,
        /// The proxied server.
        upstream: SocketAddr,
        /// Directives for the `http` block.
        http: String,
        /// Directives for `location /`.
        location: String,
    },
}

/// A named server configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSpec {
    /// Name in tables and charts.
    pub name: String,
    /// What to run.
    pub kind: ServerKind,
}

impl ServerSpec {
    /// The configuration behind a name of `--servers`: `haboob`, `nginx`,
    /// `apache-prefork`, `apache-event`.
    pub fn by_name(name: &str, seda: &Path, cache_mb: u64) -> Result<ServerSpec, ExperimentError> {
        let kind = match name {
            "haboob" => ServerKind::Haboob {
                seda: seda.to_path_buf(),
                cache_mb,
                extra: Vec::new(),
            },
            "nginx" => ServerKind::Nginx {
                workers: 2,
                http_extra: Vec::new(),
                reuseport: false,
            },
            "apache-prefork" => ServerKind::ApachePrefork { workers: 150 },
            "apache-event" => ServerKind::ApacheEvent,
            _ => {
                return Err(ExperimentError::config(format!(
                    "unknown server {name:?} (known: haboob, nginx, apache-prefork, apache-event)"
                )));
            }
        };
        Ok(ServerSpec {
            name: name.to_string(),
            kind,
        })
    }

    /// One line describing the configuration.
    pub fn describe(&self) -> String {
        match &self.kind {
            ServerKind::Haboob {
                cache_mb, extra, ..
            } => format!(
                "Haboob (seda serve), page cache {cache_mb} MiB {}",
                extra.join(" ")
            )
            .trim_end()
            .to_string(),
            ServerKind::Nginx {
                workers,
                http_extra,
                reuseport,
            } => {
                let mut d = format!(
                    "nginx {}, {workers} workers, sendfile on, access_log off",
                    version("nginx")
                );
                if *reuseport {
                    d.push_str(", reuseport");
                }
                for x in http_extra {
                    d.push_str(", ");
                    d.push_str(x.trim_end_matches(';'));
                }
                d
            }
            ServerKind::ApachePrefork { workers } => {
                format!(
                    "Apache {} prefork MPM, {workers} processes (fixed pool)",
                    version("apache")
                )
            }
            ServerKind::ApacheEvent => {
                format!(
                    "Apache {} event MPM (Debian defaults: 25 threads/child, MaxRequestWorkers 150)",
                    version("apache")
                )
            }
            ServerKind::NginxProxy {
                workers,
                upstream,
                http,
                location,
            } => format!(
                "nginx {} proxy to {upstream}, {workers} workers: {} {}",
                version("nginx"),
                http.trim(),
                location.trim()
            ),
        }
    }

    fn package(&self) -> Option<(&'static str, &'static str)> {
        match self.kind {
            ServerKind::Haboob { .. } => None,
            ServerKind::Nginx { .. } | ServerKind::NginxProxy { .. } => Some(("nginx", NGINX)),
            ServerKind::ApachePrefork { .. } | ServerKind::ApacheEvent => Some(("apache2", APACHE)),
        }
    }
}

const NGINX: &str = "/usr/sbin/nginx";
const APACHE: &str = "/usr/sbin/apache2";
const APACHE_MODULES: &str = "/usr/lib/apache2/modules";

fn version(which: &str) -> String {
    let out = match which {
        "nginx" => Command::new(NGINX).arg("-v").output(),
        _ => Command::new(APACHE).arg("-v").output(),
    };
    let Ok(out) = out else { return String::new() };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    text.split_whitespace()
        .find(|w| w.starts_with("nginx/") || w.starts_with("Apache/"))
        .map(|w| w.split('/').nth(1).unwrap_or("").to_string())
        .unwrap_or_default()
}

/// Install the Debian packages the specs need (nginx, apache2) if their binaries are
/// missing: `apt-get update && apt-get install -y`. Needs root.
pub fn ensure_installed(
    specs: &[ServerSpec],
    log: &mut dyn FnMut(&str),
) -> Result<(), ExperimentError> {
    let mut missing: Vec<&str> = specs
        .iter()
        .filter_map(|s| s.package())
        .filter(|(_, bin)| !Path::new(bin).exists())
        .map(|(pkg, _)| pkg)
        .collect();
    missing.sort_unstable();
    missing.dedup();
    apt_install(&missing, log)
}

/// Install Debian `packages` (none: nothing to do): `apt-get update && apt-get install
/// -y`. Needs root; the error says what to run otherwise.
pub fn apt_install(missing: &[&str], log: &mut dyn FnMut(&str)) -> Result<(), ExperimentError> {
    if missing.is_empty() {
        return Ok(());
    }
    log(&format!(
        "installing {} with apt-get (one time)",
        missing.join(" ")
    ));
    if !rustix::process::geteuid().is_root() {
        return Err(ExperimentError::run(format!(
            "{} missing and not running as root: install with `sudo apt-get install -y {}`",
            missing.join(" "),
            missing.join(" ")
        )));
    }
    let run = |args: &[&str]| -> Result<(), ExperimentError> {
        let out = Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| ExperimentError::step("cannot run apt-get", e))?;
        if out.status.success() {
            Ok(())
        } else {
            let err = String::from_utf8_lossy(&out.stderr);
            Err(ExperimentError::run(format!(
                "apt-get {} failed: {}",
                args.join(" "),
                tail(&err, 800)
            )))
        }
    };
    run(&["update", "-q"])?;
    let mut args = vec!["install", "-y", "-q"];
    args.extend(missing.iter().copied());
    run(&args)
}

/// A free TCP port on 127.0.0.1 (bound and released; a small race is possible).
pub fn free_port() -> Result<u16, ExperimentError> {
    let l =
        TcpListener::bind("127.0.0.1:0").map_err(|e| ExperimentError::step("no free port", e))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(ExperimentError::other)
}

/// A running server.
#[derive(Debug)]
pub struct ServerProcess {
    name: String,
    child: Child,
    addr: SocketAddr,
    /// Haboob's admin listener (stats), on a loopback port of its own.
    admin: Option<SocketAddr>,
    dir: tempfile::TempDir,
    log: PathBuf,
}

impl ServerProcess {
    /// Start `spec` serving `root` on a free loopback port and wait (up to 15 s) until
    /// it accepts connections.
    pub fn start(spec: &ServerSpec, root: &Path) -> Result<ServerProcess, ExperimentError> {
        Self::start_in(spec, root, None)
    }

    /// [`start`](Self::start), with the server's processes in the cgroup at `cgroup`
    /// (a cgroup v1 or v2 directory): a shell joins it, then `exec`s the server, so
    /// every process the server forks is charged to it from the start.
    pub fn start_in(
        spec: &ServerSpec,
        root: &Path,
        cgroup: Option<&Path>,
    ) -> Result<ServerProcess, ExperimentError> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("seda-exp-{}-", spec.name))
            .tempdir()
            .map_err(|e| ExperimentError::step("cannot create a temp dir", e))?;
        {
            use std::os::unix::fs::PermissionsExt;
            // Workers that drop to www-data must reach their files here.
            let _ = fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755));
        }
        let port = free_port()?;
        let addr: SocketAddr = SocketAddr::from(([127, 0, 0, 1], port));
        let root = root
            .canonicalize()
            .map_err(|e| ExperimentError::step(format!("file root {}", root.display()), e))?;
        let d = dir.path();
        let root_user = rustix::process::geteuid().is_root();
        let mut admin = None;
        let mut cmd = match &spec.kind {
            ServerKind::Haboob {
                seda,
                cache_mb,
                extra,
            } => {
                let admin_addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
                admin = Some(admin_addr);
                let mut c = Command::new(seda);
                c.arg("serve")
                    .arg("--listen")
                    .arg(addr.to_string())
                    .arg("--admin-listen")
                    .arg(admin_addr.to_string())
                    .arg("--root")
                    .arg(&root)
                    .arg("--cache-mb")
                    .arg(cache_mb.to_string())
                    .args(extra);
                c
            }
            ServerKind::Nginx {
                workers,
                http_extra,
                reuseport,
            } => {
                let conf = d.join("nginx.conf");
                let site = nginx_static_site(&root, port, *reuseport, http_extra);
                write(&conf, &nginx_conf_with(d, *workers, root_user, &site))?;
                nginx_cmd(d, &conf)
            }
            ServerKind::NginxProxy {
                workers,
                upstream,
                http,
                location,
            } => {
                let conf = d.join("nginx.conf");
                let site = format!(
                    "{http}\n\x20 upstream backend {{ server {upstream}; keepalive 256; }}\n\
                     \x20 server {{\n\
                     \x20   listen 127.0.0.1:{port} backlog=4096;\n\
                     \x20   location / {{\n\
                     \x20     proxy_pass http://backend;\n\
                     \x20     proxy_http_version 1.1;\n\
                     \x20     proxy_set_header Connection \"\";\n\
                     \x20     proxy_read_timeout 120s;\n\
                     \x20     {location}\n\
                     \x20   }}\n\
                     \x20 }}\n"
                );
                write(&conf, &nginx_conf_with(d, *workers, root_user, &site))?;
                nginx_cmd(d, &conf)
            }
            ServerKind::ApachePrefork { workers } => {
                let conf = d.join("httpd.conf");
                write(
                    &conf,
                    &apache_conf(d, &root, port, &Mpm::Prefork(*workers), root_user),
                )?;
                apache_cmd(&conf)
            }
            ServerKind::ApacheEvent => {
                let conf = d.join("httpd.conf");
                write(&conf, &apache_conf(d, &root, port, &Mpm::Event, root_user))?;
                apache_cmd(&conf)
            }
        };
        if let Some(cg) = cgroup {
            cmd = in_cgroup(&cmd, cg);
        }
        let log = d.join("server.log");
        let out = fs::File::create(&log)
            .map_err(|e| ExperimentError::step(format!("cannot create {}", log.display()), e))?;
        let err = out.try_clone().map_err(ExperimentError::other)?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(|e| ExperimentError::step(format!("cannot start {}", spec.name), e))?;
        let mut p = ServerProcess {
            name: spec.name.clone(),
            child,
            addr,
            admin,
            dir,
            log,
        };
        p.wait_ready(Duration::from_secs(15))?;
        Ok(p)
    }

    /// Listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The admin listener (`/_seda/stats`), for a Haboob server.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Process id of the main process.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last few KB of the server's output and error logs.
    pub fn log_tail(&self) -> String {
        let mut text = fs::read_to_string(&self.log).unwrap_or_default();
        for extra in ["error.log", "apache-error.log"] {
            if let Ok(t) = fs::read_to_string(self.dir.path().join(extra)) {
                text.push_str(&t);
            }
        }
        tail(&text, 4000)
    }

    fn wait_ready(&mut self, limit: Duration) -> Result<(), ExperimentError> {
        let t0 = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(ExperimentError::run(format!(
                    "{} exited at start ({status}): {}",
                    self.name,
                    self.log_tail()
                )));
            }
            if TcpStream::connect_timeout(&self.addr, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if t0.elapsed() > limit {
                let tail = self.log_tail();
                self.kill_group();
                return Err(ExperimentError::run(format!(
                    "{} did not listen on {} within {limit:?}: {tail}",
                    self.name, self.addr
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// CPU time (user + system) of the server's whole process tree so far, seconds:
    /// live processes' own time plus what they reaped from exited children.
    pub fn cpu_seconds(&self) -> f64 {
        process_tree_cpu(self.child.id())
    }

    /// SIGTERM the process group, wait up to 10 s, then SIGKILL it.
    pub fn stop(mut self) -> Result<(), ExperimentError> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Result<(), ExperimentError> {
        if let Ok(Some(_)) = self.child.try_wait() {
            self.kill_group();
            return Ok(());
        }
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::TERM);
        }
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.try_wait() {
                // Workers that outlive their master go too.
                std::thread::sleep(Duration::from_millis(200));
                self.kill_group();
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill_group();
        let _ = self.child.wait();
        Err(ExperimentError::run(format!(
            "{} did not stop within 10 s of SIGTERM; killed",
            self.name
        )))
    }

    fn kill_group(&mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
        let _ = self.child.try_wait();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.stop_inner();
        }
    }
}

fn write(path: &Path, text: &str) -> Result<(), ExperimentError> {
    fs::write(path, text)
        .map_err(|e| ExperimentError::step(format!("cannot write {}", path.display()), e))
}

fn tail(text: &str, n: usize) -> String {
    let start = text.len().saturating_sub(n);
    let start = (start..text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    text[start..].trim().to_string()
}

fn nginx_cmd(d: &Path, conf: &Path) -> Command {
    let mut c = Command::new(NGINX);
    c.arg("-p")
        .arg(d)
        .arg("-e")
        .arg(d.join("error.log"))
        .arg("-c")
        .arg(conf);
    c
}

/// A shell that moves itself into `cgroup`, then `exec`s `cmd`.
fn in_cgroup(cmd: &Command, cgroup: &Path) -> Command {
    let mut c = Command::new("/bin/sh");
    c.arg("-c")
        .arg("echo $$ > \"$0/cgroup.procs\" && exec \"$@\"")
        .arg(cgroup)
        .arg(cmd.get_program())
        .args(cmd.get_args());
    c
}

/// The `http` block's static site: sendfile, `extra` directives, one server.
fn nginx_static_site(root: &Path, port: u16, reuseport: bool, extra: &[String]) -> String {
    let listen = if reuseport { " reuseport" } else { "" };
    let extra: String = extra.iter().map(|x| format!("\x20 {x}\n")).collect();
    format!(
        "\x20 sendfile on;\n\
         \x20 tcp_nopush on;\n\
         {extra}\
         \x20 server {{\n\
         \x20   listen 127.0.0.1:{port}{listen};\n\
         \x20   root {root};\n\
         \x20   location / {{ }}\n\
         \x20 }}\n",
        root = root.display()
    )
}

/// nginx's main configuration with `site` inside its `http` block.
fn nginx_conf_with(d: &Path, workers: u32, root_user: bool, site: &str) -> String {
    let d = d.display();
    let user = if root_user {
        "user www-data www-data;\n"
    } else {
        ""
    };
    format!(
        "{user}worker_processes {workers};\n\
         daemon off;\n\
         pid {d}/nginx.pid;\n\
         error_log {d}/error.log warn;\n\
         worker_rlimit_nofile 16384;\n\
         events {{ worker_connections 8192; }}\n\
         http {{\n\
         \x20 access_log off;\n\
         \x20 keepalive_timeout 65;\n\
         \x20 keepalive_requests 1000;\n\
         \x20 default_type application/octet-stream;\n\
         \x20 client_body_temp_path {d}/client_body;\n\
         \x20 proxy_temp_path {d}/proxy;\n\
         \x20 fastcgi_temp_path {d}/fastcgi;\n\
         \x20 uwsgi_temp_path {d}/uwsgi;\n\
         \x20 scgi_temp_path {d}/scgi;\n\
         {site}\
         }}\n"
    )
}

enum Mpm {
    Prefork(u32),
    Event,
}

fn apache_cmd(conf: &Path) -> Command {
    let mut c = Command::new(APACHE);
    c.arg("-f").arg(conf).arg("-DFOREGROUND");
    c
}

fn apache_conf(d: &Path, root: &Path, port: u16, mpm: &Mpm, root_user: bool) -> String {
    let d = d.display();
    let root = root.display();
    let m = APACHE_MODULES;
    let user = if root_user {
        "User www-data\nGroup www-data\n"
    } else {
        ""
    };
    let mpm_conf = match mpm {
        Mpm::Prefork(n) => format!(
            "LoadModule mpm_prefork_module {m}/mod_mpm_prefork.so\n\
             StartServers {n}\nMinSpareServers {n}\nMaxSpareServers {}\nServerLimit {n}\n\
             MaxRequestWorkers {n}\nMaxConnectionsPerChild 0\n",
            n + 1
        ),
        Mpm::Event => format!(
            "LoadModule mpm_event_module {m}/mod_mpm_event.so\n\
             StartServers 2\nMinSpareThreads 25\nMaxSpareThreads 75\nThreadLimit 64\n\
             ThreadsPerChild 25\nMaxRequestWorkers 150\nMaxConnectionsPerChild 0\n"
        ),
    };
    format!(
        "ServerRoot {d}\n\
         ServerName 127.0.0.1\n\
         Listen 127.0.0.1:{port}\n\
         PidFile {d}/apache.pid\n\
         DefaultRuntimeDir {d}\n\
         ErrorLog {d}/apache-error.log\n\
         LogLevel warn\n\
         {user}\
         {mpm_conf}\
         LoadModule authz_core_module {m}/mod_authz_core.so\n\
         KeepAlive On\n\
         MaxKeepAliveRequests 100\n\
         KeepAliveTimeout 5\n\
         DocumentRoot {root}\n\
         <Directory />\n  Require all denied\n  AllowOverride None\n</Directory>\n\
         <Directory {root}>\n  Require all granted\n  Options None\n</Directory>\n"
    )
}

/// User + system CPU seconds of process `pid` alone (all its threads; neither its
/// children nor what it reaped from them); 0 if it is gone.
pub fn process_cpu(pid: u32) -> f64 {
    let Ok(stat) = Process::new(pid as i32).and_then(|p| p.stat()) else {
        return 0.0;
    };
    (stat.utime + stat.stime) as f64 / procfs::ticks_per_second() as f64
}

/// User + system CPU seconds of `pid` and all its descendants, including time reaped
/// from exited children.
pub fn process_tree_cpu(pid: u32) -> f64 {
    let Ok(all) = procfs::process::all_processes() else {
        return 0.0;
    };
    // (pid, parent, ticks of its own and of its reaped children)
    let procs: Vec<(i32, i32, u64)> = all
        .filter_map(|p| p.ok()?.stat().ok())
        .map(|s| {
            let reaped = (s.cutime + s.cstime).max(0) as u64;
            (s.pid, s.ppid, s.utime + s.stime + reaped)
        })
        .collect();
    let mut tree = vec![pid as i32];
    let mut total = 0u64;
    let mut i = 0;
    while i < tree.len() {
        let cur = tree[i];
        for &(p, ppid, ticks) in &procs {
            if p == cur {
                total += ticks;
            }
            if ppid == cur && p != cur {
                tree.push(p);
            }
        }
        i += 1;
    }
    total as f64 / procfs::ticks_per_second() as f64
}

/// `GET path` on a fresh connection; the status code, for a readiness check.
pub fn probe(addr: SocketAddr, path: &str) -> Result<u16, ExperimentError> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(ExperimentError::other)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(ExperimentError::other)?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .map_err(ExperimentError::other)?;
    let mut head = [0u8; 64];
    let n = s.read(&mut head).map_err(ExperimentError::other)?;
    let line = String::from_utf8_lossy(&head[..n]);
    line.to_string()
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| ExperimentError::run(format!("not an HTTP response: {line:?}")))
}
