//! The bubblewrap command line: which namespaces, which host paths, in which order.
//!
//! Only non-secret things go on the command line, which any process can read in
//! `/proc/<pid>/cmdline`. The environment goes through [`env_args`] instead, which bubblewrap
//! reads from a file descriptor (`--args`).

use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::fd::RawFd;
use std::path::Path;

use secrecy::zeroize::Zeroizing;
use secrecy::ExposeSecret;

use super::request::{SandboxRequest, ENGINE_PROGRAM, STEP_GID, STEP_UID};
use super::workspace::{COMMAND_FILE, ETC_DIR, OUTPUTS_FILE, WORK_DIR};

/// `PATH` inside the sandbox.
pub(super) const SANDBOX_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// The step's working directory and `HOME` inside the sandbox.
pub(super) const SANDBOX_WORK: &str = "/work";
/// Where `$OVERTURE_OUTPUTS` points inside the sandbox.
pub(super) const SANDBOX_OUTPUTS: &str = "/run/overture/outputs";
/// Where a command too long to be an argument is, inside the sandbox.
pub(super) const SANDBOX_COMMAND: &str = "/run/overture/command";
/// The longest command passed to the shell as an argument (`/bin/sh -c`), where `ps` shows it;
/// a longer one goes in a file instead, since the kernel refuses an argument of 128 KiB or more
/// (`MAX_ARG_STRLEN`), and bubblewrap would not even start.
pub(super) const INLINE_COMMAND: usize = 64 * 1024;
/// The sandbox's host name: says nothing about the host or the tenant.
const HOSTNAME: &str = "sandbox";

/// Top-level directories that are either symlinks into /usr (merged /usr, as on Debian 12) or,
/// on older systems, real directories of system files.
const SYSTEM_DIRS: [&str; 6] = ["bin", "sbin", "lib", "lib32", "lib64", "libx32"];

/// What programs need from `/etc`, each bound read-only if it exists. Never all of /etc: what a
/// step cannot see it cannot probe, whatever its uid.
const ETC_FILES: [&str; 18] = [
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "nsswitch.conf",
    "host.conf",
    "hosts",
    "resolv.conf",
    "gai.conf",
    "services",
    "protocols",
    "ssl/certs",
    "ssl/openssl.cnf",
    "pki/tls/certs",
    "alternatives",
    "localtime",
    "timezone",
    "os-release",
    // The client's settings only; the host keys beside them stay out.
    "ssh/ssh_config",
];

/// Where util-linux's `setpriv` may be, merged /usr first. It is the sandbox's last step before
/// the command: bubblewrap itself can change the uid only inside a user namespace, and one made
/// by root maps the step to the host's uid 0, to which the kernel's global knobs (`/proc/sys`)
/// stay open whatever the capabilities.
const SETPRIV: [&str; 2] = ["/usr/bin/setpriv", "/bin/setpriv"];

/// The capabilities `setpriv` needs to become the step's user and empty the bounding set; the
/// step itself ends up with none of them (see [`step_user_args`]).
const SWITCH_USER_CAPS: [&str; 3] = ["CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"];

/// The host's system directories as the sandbox sees them, worked out once.
#[derive(Debug, Clone)]
pub(super) struct SystemLayout {
    args: Vec<OsString>,
    /// `setpriv`, when the host has it: without it no step can run (see [`Self::setpriv`]).
    setpriv: Option<&'static str>,
}

impl SystemLayout {
    /// Looks at the host's `/` to mirror its merged-/usr symlinks.
    pub(super) fn detect() -> Self {
        let mut args = Vec::new();
        push(&mut args, ["--ro-bind", "/usr", "/usr"]);
        // bubblewrap makes a missing parent of a mount point 0700, which the step's user could
        // not pass through: every directory something is bound under is made first, 0755.
        let etc = Path::new("/etc");
        let mut dirs = vec![etc.to_owned()];
        for name in ETC_FILES.iter().chain(["ssh/ssh_config.d"].iter()) {
            let host = etc.join(name);
            if host.exists() {
                let parents = host.ancestors().skip(1).take_while(|dir| *dir != etc);
                dirs.extend(parents.map(Path::to_owned));
            }
        }
        if let Some(bin) = Path::new(ENGINE_PROGRAM).parent() {
            dirs.extend(
                bin.ancestors()
                    .take_while(|dir| *dir != Path::new("/"))
                    .map(Path::to_owned),
            );
        }
        dirs.extend(
            [SANDBOX_OUTPUTS, SANDBOX_COMMAND]
                .iter()
                .filter_map(|path| Path::new(path).parent())
                .map(Path::to_owned),
        );
        dirs.sort();
        dirs.dedup();
        for dir in &dirs {
            push(
                &mut args,
                [
                    OsStr::new("--perms"),
                    OsStr::new("0755"),
                    OsStr::new("--dir"),
                    dir.as_os_str(),
                ],
            );
        }
        for name in SYSTEM_DIRS {
            let host = Path::new("/").join(name);
            let Ok(metadata) = fs::symlink_metadata(&host) else {
                continue;
            };
            if metadata.file_type().is_symlink() {
                if let Ok(target) = fs::read_link(&host) {
                    push(
                        &mut args,
                        [
                            OsStr::new("--symlink"),
                            target.as_os_str(),
                            host.as_os_str(),
                        ],
                    );
                }
            } else if metadata.is_dir() {
                push(
                    &mut args,
                    [OsStr::new("--ro-bind"), host.as_os_str(), host.as_os_str()],
                );
            }
        }
        for name in ETC_FILES {
            let host = Path::new("/etc").join(name);
            push(
                &mut args,
                [
                    OsStr::new("--ro-bind-try"),
                    host.as_os_str(),
                    host.as_os_str(),
                ],
            );
        }
        // The client's drop-in settings, which ssh_config includes.
        push(
            &mut args,
            [
                "--ro-bind-try",
                "/etc/ssh/ssh_config.d",
                "/etc/ssh/ssh_config.d",
            ],
        );
        let setpriv = SETPRIV.into_iter().find(|path| Path::new(path).is_file());
        Self { args, setpriv }
    }

    /// `setpriv`, which drops the step to its own user; `None` when the host lacks util-linux's
    /// `setpriv`, and then every run fails as [`SandboxError::Unusable`](super::SandboxError).
    pub(super) fn setpriv(&self) -> Option<&'static str> {
        self.setpriv
    }

    /// The bubblewrap arguments that mount them.
    pub(super) fn args(&self) -> &[OsString] {
        &self.args
    }
}

/// Descriptors bubblewrap inherits, by number.
#[derive(Debug, Clone, Copy)]
pub(super) struct Fds {
    /// `--args`: the environment, see [`env_args`].
    pub(super) args: RawFd,
    /// `--json-status-fd`: bubblewrap writes the init process's pid, then the exit code.
    pub(super) status: RawFd,
    /// `--block-fd`: the sandbox waits for a byte here before it starts the command.
    pub(super) block: RawFd,
}

/// The whole bubblewrap command line after the program name. `engine_program` is the engine's
/// own program on the host, shown at [`ENGINE_PROGRAM`] when given.
pub(super) fn command_line(
    layout: &SystemLayout,
    workspace: &Path,
    request: &SandboxRequest,
    engine_program: Option<&Path>,
    fds: Fds,
) -> Vec<OsString> {
    let mut args = Vec::new();
    descriptor_args(&mut args, fds);
    namespace_args(&mut args, request);
    system_mounts(&mut args, layout, workspace);
    let inline = command_file(&request.command).is_none();
    work_mounts(&mut args, workspace, inline, engine_program);
    push(&mut args, ["--chdir", SANDBOX_WORK]);
    // Last of the mounts: after it, nothing more can be created in the root.
    push(&mut args, ["--remount-ro", "/"]);

    args.extend(step_user_args(layout));
    if inline {
        push(&mut args, ["/bin/sh", "-c", &request.command]);
    } else {
        // The shell reads the file as it would the `-c` text; only `$0` differs.
        push(&mut args, ["/bin/sh", SANDBOX_COMMAND]);
    }
    args
}

/// The descriptors bubblewrap reads the environment from, reports on and waits on.
fn descriptor_args(args: &mut Vec<OsString>, fds: Fds) {
    // bubblewrap is started with an empty environment already; --clearenv makes sure the step
    // gets only what --args sets even if that ever changes.
    push(args, ["--clearenv", "--args", &fds.args.to_string()]);
    push(args, ["--json-status-fd", &fds.status.to_string()]);
    push(args, ["--block-fd", &fds.block.to_string()]);
}

/// The namespaces the sandbox gets of its own, the capabilities it keeps, and its session.
fn namespace_args(args: &mut Vec<OsString>, request: &SandboxRequest) {
    push(
        args,
        [
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
        ],
    );
    // A step with a network policy gets its own namespace too, connected by `network`.
    if !request.network || request.network_policy.is_some() {
        push(args, ["--unshare-net"]);
    }
    // As root, the sandbox would otherwise keep every capability and could remount /usr
    // read-write. Only what `setpriv` needs to become the step's user is kept, and only until
    // it does (the sandbox's init keeps none); bubblewrap also sets no_new_privs, so no exec can
    // win any back.
    args.extend(kept_capabilities());
    push(
        args,
        ["--die-with-parent", "--new-session", "--hostname", HOSTNAME],
    );
}

/// The host's system, read-only, the step's `/etc/passwd` and `/etc/group`, `/proc`, `/dev`
/// and the shared temporary folders.
fn system_mounts(args: &mut Vec<OsString>, layout: &SystemLayout, workspace: &Path) {
    args.extend(layout.args.iter().cloned());
    for name in ["passwd", "group"] {
        let host = workspace.join(ETC_DIR).join(name);
        let inside = Path::new("/etc").join(name);
        push(
            args,
            [
                OsStr::new("--ro-bind"),
                host.as_os_str(),
                inside.as_os_str(),
            ],
        );
    }
    push(args, ["--proc", "/proc"]);
    // The kernel's global knobs, read-only on top of the step's uid: bubblewrap covers
    // /proc/irq and /proc/bus itself, not these. /proc/sys still shows the sandbox's own
    // network namespace, since its net/ part follows the reader.
    push(args, ["--ro-bind", "/proc/sys", "/proc/sys"]);
    push(
        args,
        [
            "--ro-bind-try",
            "/proc/sysrq-trigger",
            "/proc/sysrq-trigger",
        ],
    );
    // /tmp and /dev/shm as everywhere: anyone's to write, each file its owner's (sticky).
    // Python's multiprocessing (ansible) needs /dev/shm.
    push(args, ["--dev", "/dev"]);
    for shared in ["/tmp", "/dev/shm"] {
        push(args, ["--perms", "1777", "--tmpfs", shared]);
    }
}

/// The step's own files: its working folder, its outputs file, its command file when the
/// command is not `inline`, and the engine's program when it is given.
fn work_mounts(
    args: &mut Vec<OsString>,
    workspace: &Path,
    inline: bool,
    engine_program: Option<&Path>,
) {
    let work = workspace.join(WORK_DIR);
    push(
        args,
        [
            OsStr::new("--bind"),
            work.as_os_str(),
            OsStr::new(SANDBOX_WORK),
        ],
    );
    let outputs = workspace.join(OUTPUTS_FILE);
    push(
        args,
        [
            OsStr::new("--bind"),
            outputs.as_os_str(),
            OsStr::new(SANDBOX_OUTPUTS),
        ],
    );
    if !inline {
        let script = workspace.join(COMMAND_FILE);
        push(
            args,
            [
                OsStr::new("--ro-bind"),
                script.as_os_str(),
                OsStr::new(SANDBOX_COMMAND),
            ],
        );
    }
    if let Some(program) = engine_program {
        // Read-only: the step runs the engine's code, it must not be able to change it.
        push(
            args,
            [
                OsStr::new("--ro-bind"),
                program.as_os_str(),
                OsStr::new(ENGINE_PROGRAM),
            ],
        );
    }
}

/// Every capability dropped but [`SWITCH_USER_CAPS`], as bubblewrap arguments.
pub(super) fn kept_capabilities() -> Vec<OsString> {
    let mut args = Vec::new();
    push(&mut args, ["--cap-drop", "ALL"]);
    for cap in SWITCH_USER_CAPS {
        push(&mut args, ["--cap-add", cap]);
    }
    args
}

/// `setpriv` and its arguments: the command runs as [`STEP_UID`]:[`STEP_GID`] with no
/// supplementary groups, no capabilities (a non-root uid loses its permitted and effective ones
/// at the switch) and an empty bounding and inheritable set.
pub(super) fn step_user_args(layout: &SystemLayout) -> Vec<OsString> {
    let uid = format!("--reuid={STEP_UID}");
    let gid = format!("--regid={STEP_GID}");
    let mut args = Vec::new();
    // `run` refuses to start without setpriv; the bare name only keeps this total.
    push(&mut args, [layout.setpriv.unwrap_or("setpriv")]);
    push(
        &mut args,
        [
            uid.as_str(),
            gid.as_str(),
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--",
        ],
    );
    args
}

/// The content of the workspace's command file, for a command too long to be an argument.
pub(super) fn command_file(command: &str) -> Option<Vec<u8>> {
    (command.len() > INLINE_COMMAND).then(|| command.as_bytes().to_vec())
}

/// The step's whole environment as NUL-separated `--setenv NAME VALUE` arguments, for
/// bubblewrap's `--args` descriptor. Zeroed when dropped, since it holds the secrets.
pub(super) fn env_args(request: &SandboxRequest) -> Zeroizing<Vec<u8>> {
    let fixed = [
        ("PATH", SANDBOX_PATH),
        ("HOME", SANDBOX_WORK),
        ("OVERTURE_OUTPUTS", SANDBOX_OUTPUTS),
    ];
    let plain = request
        .env
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()));
    let secret = request
        .secret_env
        .iter()
        .map(|(name, value)| (name.as_str(), value.expose_secret()));
    let all = || fixed.into_iter().chain(plain.clone()).chain(secret.clone());

    const SETENV: &[u8] = b"--setenv\0";
    // Sized up front: a reallocation would leave an unzeroed copy of the secrets behind.
    let len = all()
        .map(|(name, value)| SETENV.len() + name.len() + value.len() + 2)
        .sum();
    let mut data = Zeroizing::new(Vec::with_capacity(len));
    for (name, value) in all() {
        data.extend_from_slice(SETENV);
        data.extend_from_slice(name.as_bytes());
        data.push(0);
        data.extend_from_slice(value.as_bytes());
        data.push(0);
    }
    data
}

fn push<S: AsRef<OsStr>, const N: usize>(args: &mut Vec<OsString>, new: [S; N]) {
    args.extend(new.iter().map(|arg| arg.as_ref().to_owned()));
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use secrecy::SecretString;

    use super::*;

    fn request(network: bool) -> SandboxRequest {
        SandboxRequest {
            id: "t".into(),
            command: "true".into(),
            env: vec![("A".into(), "1".into())],
            secret_env: vec![("S".into(), SecretString::from("hush"))],
            files: vec![],
            network,
            engine_program: false,
            timeout: Duration::from_secs(1),
            output_limit: 10,
            collect: vec![],
            log: None,
            limits: Default::default(),
            network_policy: None,
        }
    }

    fn line(network: bool) -> Vec<String> {
        line_with(network, None)
    }

    fn line_with(network: bool, engine_program: Option<&Path>) -> Vec<String> {
        let fds = Fds {
            args: 3,
            status: 4,
            block: 5,
        };
        command_line(
            &SystemLayout::detect(),
            Path::new("/ws/t"),
            &request(network),
            engine_program,
            fds,
        )
        .into_iter()
        .map(|arg| arg.to_string_lossy().into_owned())
        .collect()
    }

    #[test]
    fn network_is_cut_only_when_not_wanted() {
        assert!(line(false).iter().any(|arg| arg == "--unshare-net"));
        assert!(!line(true).iter().any(|arg| arg == "--unshare-net"));
    }

    #[test]
    fn a_network_policy_gives_the_step_its_own_namespace() {
        let mut request = request(true);
        request.network_policy = Some(crate::NetworkPolicy::default());
        let layout = SystemLayout {
            args: vec![],
            setpriv: None,
        };
        let fds = Fds {
            args: 3,
            status: 4,
            block: 5,
        };
        let line = command_line(&layout, Path::new("/ws"), &request, None, fds);
        assert!(line.iter().any(|arg| arg == "--unshare-net"), "{line:?}");
    }

    #[test]
    fn root_is_remounted_read_only_after_every_mount() {
        let line = line(false);
        let remount = line.iter().position(|arg| arg == "--remount-ro");
        let last_mount = line
            .iter()
            .rposition(|arg| arg.starts_with("--") && arg.contains("bind"));
        assert!(remount > last_mount, "{line:?}");
    }

    #[test]
    fn the_engine_program_is_bound_read_only_only_when_given() {
        let program = ENGINE_PROGRAM;
        assert!(!line(true).iter().any(|arg| arg == program));
        let line = line_with(true, Some(Path::new("/opt/overture/bin/overture")));
        let at = line
            .iter()
            .position(|arg| arg == program)
            .expect("the program is bound");
        assert_eq!(
            &line[at - 2..=at],
            ["--ro-bind", "/opt/overture/bin/overture", program]
        );
        let remount = line.iter().position(|arg| arg == "--remount-ro");
        assert!(remount > Some(at), "{line:?}");
    }

    #[test]
    fn a_long_command_is_read_from_a_file_instead_of_the_command_line() {
        let layout = SystemLayout::detect();
        let fds = Fds {
            args: 3,
            status: 4,
            block: 5,
        };
        let mut long = request(false);
        long.command = format!("echo {}", "a".repeat(INLINE_COMMAND));
        let line: Vec<String> = command_line(&layout, Path::new("/ws/t"), &long, None, fds)
            .into_iter()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect();
        assert_eq!(line[line.len() - 2..], ["/bin/sh", SANDBOX_COMMAND]);
        assert_eq!(line[line.len() - 3], "--", "setpriv's arguments end first");
        let at = line
            .iter()
            .position(|arg| arg == SANDBOX_COMMAND)
            .expect("the file is bound");
        assert_eq!(&line[at - 2..at], ["--ro-bind", "/ws/t/command"]);
        assert!(line.iter().all(|arg| arg.len() < INLINE_COMMAND));
        assert_eq!(
            command_file(&long.command).as_deref(),
            Some(long.command.as_bytes())
        );

        let short = line_with(false, None);
        assert_eq!(short[short.len() - 3..], ["/bin/sh", "-c", "true"]);
        assert!(!short.iter().any(|arg| arg == SANDBOX_COMMAND));
        assert_eq!(command_file("true"), None);
    }

    #[test]
    fn the_command_runs_as_the_step_user_with_no_capabilities() {
        let line = line(false);
        let setpriv = line
            .iter()
            .position(|arg| arg.ends_with("setpriv"))
            .expect("setpriv runs the command");
        assert_eq!(
            &line[setpriv + 1..setpriv + 7],
            [
                "--reuid=65533",
                "--regid=65533",
                "--clear-groups",
                "--inh-caps=-all",
                "--bounding-set=-all",
                "--",
            ]
        );
        assert_eq!(&line[setpriv + 7..], ["/bin/sh", "-c", "true"]);
        let kept: Vec<_> = line
            .windows(2)
            .filter(|pair| pair[0] == "--cap-add")
            .map(|pair| pair[1].as_str())
            .collect();
        assert_eq!(kept, SWITCH_USER_CAPS, "only what setpriv needs is kept");
    }

    #[test]
    fn directories_above_mounts_are_made_open_to_the_step_first() {
        let line = line(false);
        let made = |dir: &str| {
            line.windows(4)
                .position(|w| w == ["--perms", "0755", "--dir", dir])
                .unwrap_or_else(|| panic!("{dir} is not made: {line:?}"))
        };
        let first_bound = |under: &str| {
            line.iter()
                .position(|arg| arg.starts_with(under))
                .expect("something is bound there")
        };
        assert!(made("/etc") < first_bound("/etc/"));
        assert!(made("/run/overture") < first_bound("/run/overture/"));
        assert!(made("/run") < made("/run/overture"));
    }

    #[test]
    fn the_kernels_global_knobs_are_read_only() {
        let line = line(false);
        let proc = line.iter().position(|arg| arg == "--proc");
        let sys = line
            .windows(3)
            .position(|w| w == ["--ro-bind", "/proc/sys", "/proc/sys"]);
        assert!(
            sys > proc,
            "/proc/sys is covered after /proc is mounted: {line:?}"
        );
    }

    #[test]
    fn secrets_stay_off_the_command_line() {
        assert!(!line(false).iter().any(|arg| arg.contains("hush")));
        let env = env_args(&request(false));
        assert!(env.windows(4).any(|window| window == b"hush"));
    }

    #[test]
    fn env_args_are_setenv_triples() {
        let env = env_args(&request(false));
        let parts: Vec<&[u8]> = env.split(|&b| b == 0).collect();
        // Five variables of three parts each, and the empty slice after the final NUL.
        assert_eq!(parts.len(), 16);
        assert_eq!(&parts[12..15], [&b"--setenv"[..], b"S", b"hush"]);
    }
}
