//! One control group per attempt, with the attempt's limits on memory, processes and CPU, on
//! cgroup v2 where the machine has it and on the v1 hierarchies otherwise.
//!
//! [`Cgroups`] is found once per engine: on v2 it is a directory of the unified hierarchy, on v1
//! one directory in each of the memory, pids and cpu hierarchies. Either way the engine's own
//! cgroup is the parent, and under it `overture-<hash of the workspace root>` holds one group
//! per attempt, named by the sandbox id: two engines on one machine never touch each other's
//! groups, and an engine that starts again finds the ones its dead predecessor left
//! ([`Cgroups::remove_leftovers`]).
//!
//! These are a handful of writes to files; a crate for them (such as `cgroups-rs`) would bring
//! more code than it saves, and none of it decides anything here.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use overture_events::StepLimits;

/// Where cgroup file systems are mounted on every distribution this runs on.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// `statfs` type of a cgroup v2 file system.
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
/// The CPU period the quota is a share of, in microseconds: the kernel's default.
const CPU_PERIOD_US: u64 = 100_000;
/// The v1 controllers used, each its own hierarchy.
const V1_CONTROLLERS: [&str; 3] = ["memory", "pids", "cpu"];

/// The cgroup file systems this engine puts attempts in.
#[derive(Debug, Clone)]
pub(crate) enum Cgroups {
    /// cgroup v2: the engine's parent group for attempts in the unified hierarchy.
    V2 {
        /// `<engine's cgroup>/overture-<hash>`.
        parent: PathBuf,
    },
    /// cgroup v1: the parent group in the memory, pids and cpu hierarchies, in that order.
    V1 {
        /// `<hierarchy>/<engine's cgroup>/overture-<hash>` for each controller.
        parents: [PathBuf; 3],
    },
}

/// Which limit an attempt ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reached {
    /// The kernel killed a process for memory.
    Memory,
    /// A fork or clone was refused.
    Pids,
}

impl Cgroups {
    /// Finds the hierarchies and the engine's place in them; `tag` tells this engine's groups
    /// apart (a hash of its workspace root). An error says what is missing.
    pub(crate) fn detect(tag: &str) -> Result<Self, String> {
        let read = |path: &str| {
            fs::read_to_string(path).map_err(|error| format!("cannot read {path}: {error}"))
        };
        let machine = Machine {
            root: PathBuf::from(CGROUP_ROOT),
            root_is_v2: is_cgroup2(Path::new(CGROUP_ROOT)),
            own: read("/proc/self/cgroup")?,
            mountinfo: read("/proc/self/mountinfo")?,
        };
        Self::choose(&machine, tag)
    }

    /// v2 if the cgroup root is cgroup2 and the engine's own group may hand the controllers
    /// down, else v1 if each controller has a hierarchy of its own.
    fn choose(machine: &Machine, tag: &str) -> Result<Self, String> {
        let name = format!("overture-{tag}");
        if machine.root_is_v2 {
            let path = machine
                .own
                .lines()
                .find_map(|line| line.strip_prefix("0::"))
                .ok_or("/proc/self/cgroup names no cgroup v2 group")?;
            let root = mounts(&machine.mountinfo)
                .find(|m| m.kind == "cgroup2" && m.point == machine.root)
                .map_or("/", |m| m.root);
            let base = machine.root.join(relative(path, root));
            // What the engine's group may hand down is what its parent enabled for it, which
            // may be less than the machine has (a container, a service without delegation).
            let listed = base.join("cgroup.controllers");
            let controllers = fs::read_to_string(&listed).unwrap_or_default();
            let missing: Vec<&str> = V1_CONTROLLERS
                .into_iter()
                .filter(|c| !controllers.split_whitespace().any(|have| have == *c))
                .collect();
            if !missing.is_empty() {
                return Err(format!(
                    "cgroup v2 lacks the {} controller(s) in the engine's group ({} lists \"{}\")",
                    missing.join(", "),
                    listed.display(),
                    controllers.trim()
                ));
            }
            return Ok(Cgroups::V2 {
                parent: base.join(name),
            });
        }
        let mut parents = Vec::new();
        for controller in V1_CONTROLLERS {
            let mount = mounts(&machine.mountinfo)
                .find(|m| m.kind == "cgroup" && m.options.split(',').any(|o| o == controller))
                .ok_or_else(|| {
                    format!("no cgroup v2 with controllers at {CGROUP_ROOT}, and no cgroup v1 hierarchy for `{controller}`")
                })?;
            let path = machine
                .own
                .lines()
                .find_map(|line| {
                    let mut parts = line.splitn(3, ':');
                    let (_, list, path) = (parts.next()?, parts.next()?, parts.next()?);
                    list.split(',').any(|c| c == controller).then_some(path)
                })
                .ok_or_else(|| format!("/proc/self/cgroup names no `{controller}` group"))?;
            parents.push(mount.point.join(relative(path, mount.root)).join(&name));
        }
        let parents: [PathBuf; 3] = parents
            .try_into()
            .map_err(|_| "three controllers were expected".to_owned())?;
        Ok(Cgroups::V1 { parents })
    }

    /// The engine's parent groups, under which each attempt's group goes.
    pub(crate) fn parents(&self) -> Vec<PathBuf> {
        match self {
            Cgroups::V2 { parent } => vec![parent.clone()],
            Cgroups::V1 { parents } => parents.to_vec(),
        }
    }

    /// `"cgroup v2"` or `"cgroup v1"`, for messages.
    pub(crate) fn version(&self) -> &'static str {
        match self {
            Cgroups::V2 { .. } => "cgroup v2",
            Cgroups::V1 { .. } => "cgroup v1",
        }
    }

    /// Makes the group of attempt `id` with `limits` set, ready for its first process.
    pub(crate) fn create(&self, id: &str, limits: &StepLimits) -> io::Result<AttemptGroup> {
        // The last attempt to end removes the parent group, and may do so between this one
        // making it and making its own group in it: then it is made again.
        let mut tries = 0;
        loop {
            match self.create_once(id, limits) {
                Err(error) if error.kind() == io::ErrorKind::NotFound && tries < 3 => tries += 1,
                other => return other,
            }
        }
    }

    fn create_once(&self, id: &str, limits: &StepLimits) -> io::Result<AttemptGroup> {
        let quota = u64::from(limits.cpu_millis) * CPU_PERIOD_US / 1000;
        match self {
            Cgroups::V2 { parent } => {
                prepare_v2_parent(parent)?;
                let dir = parent.join(id);
                fs::create_dir(&dir)?;
                let group = AttemptGroup {
                    dirs: vec![dir.clone()],
                    v2: true,
                };
                write(&dir, "memory.max", limits.memory_bytes)?;
                // Swap would let the attempt hold more than its limit; no swap file, no error.
                let _ = fs::write(dir.join("memory.swap.max"), "0");
                write(&dir, "pids.max", limits.pids)?;
                fs::write(dir.join("cpu.max"), format!("{quota} {CPU_PERIOD_US}"))?;
                Ok(group)
            }
            Cgroups::V1 { parents } => {
                let mut group = AttemptGroup {
                    dirs: Vec::new(),
                    v2: false,
                };
                for parent in parents {
                    fs::create_dir_all(parent)?;
                    let dir = parent.join(id);
                    fs::create_dir(&dir)?;
                    group.dirs.push(dir);
                }
                let [memory, pids, cpu] = [&group.dirs[0], &group.dirs[1], &group.dirs[2]];
                write(memory, "memory.limit_in_bytes", limits.memory_bytes)?;
                // Present only with swap accounting; where it is, swap counts too.
                if memory.join("memory.memsw.limit_in_bytes").exists() {
                    write(memory, "memory.memsw.limit_in_bytes", limits.memory_bytes)?;
                }
                write(pids, "pids.max", limits.pids)?;
                write(cpu, "cpu.cfs_period_us", CPU_PERIOD_US)?;
                write(cpu, "cpu.cfs_quota_us", quota)?;
                Ok(group)
            }
        }
    }

    /// Kills what is left in the groups a dead engine of this workspace root left, and removes
    /// them; returns how many attempts' groups were removed (one per attempt on v1 too).
    pub(crate) fn remove_leftovers(&self) -> io::Result<usize> {
        let parents: Vec<&PathBuf> = match self {
            Cgroups::V2 { parent } => vec![parent],
            Cgroups::V1 { parents } => parents.iter().collect(),
        };
        let mut removed = std::collections::BTreeSet::new();
        for parent in parents {
            let entries = match fs::read_dir(parent) {
                Ok(entries) => entries,
                Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
                Err(error) => return Err(error),
            };
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    empty_and_remove(&entry.path())?;
                    removed.insert(entry.file_name());
                }
            }
            let _ = fs::remove_dir(parent);
        }
        Ok(removed.len())
    }
}

/// The group of one attempt; removed, with anything still in it killed, when dropped.
#[derive(Debug)]
pub(crate) struct AttemptGroup {
    /// One directory on v2; memory, pids and cpu on v1.
    dirs: Vec<PathBuf>,
    v2: bool,
}

impl AttemptGroup {
    /// Moves process `pid` (the sandbox's init, before it starts the step) into the group, so
    /// everything it forks is in it too.
    pub(crate) fn add(&self, pid: u32) -> io::Result<()> {
        for dir in &self.dirs {
            fs::write(dir.join("cgroup.procs"), pid.to_string())?;
        }
        Ok(())
    }

    /// The limits the attempt ran into, memory first: a fork refused for memory is an out of
    /// memory too, whatever the shell made of it.
    pub(crate) fn reached(&self) -> Vec<Reached> {
        let (memory, pids) = if self.v2 {
            let memory = read_field(&self.dirs[0].join("memory.events"), "oom_kill");
            let pids = read_field(&self.dirs[0].join("pids.events"), "max");
            (memory, pids)
        } else {
            let memory = read_field(&self.dirs[0].join("memory.oom_control"), "oom_kill");
            let pids = read_field(&self.dirs[1].join("pids.events"), "max");
            (memory, pids)
        };
        let mut reached = Vec::new();
        if memory > 0 {
            reached.push(Reached::Memory);
        }
        if pids > 0 {
            reached.push(Reached::Pids);
        }
        reached
    }
}

impl Drop for AttemptGroup {
    fn drop(&mut self) {
        for dir in &self.dirs {
            if let Err(error) = empty_and_remove(dir) {
                tracing::error!(group = %dir.display(), %error, "could not remove an attempt's cgroup");
            }
            // The engine's parent group goes with its last attempt; while another attempt's
            // group is in it, the kernel refuses, which is as it should be.
            if let Some(parent) = dir.parent() {
                let _ = fs::remove_dir(parent);
            }
        }
    }
}

/// Kills every process in the group at `dir` and removes it.
fn empty_and_remove(dir: &Path) -> io::Result<()> {
    // A process dies in microseconds once killed, but leaves its group only once it has: the
    // rmdir is tried again for a bounded time, never waited on forever.
    for _ in 0..200 {
        let procs = match fs::read_to_string(dir.join("cgroup.procs")) {
            Ok(procs) => procs,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(error) => return Err(error),
        };
        for pid in procs
            .lines()
            .filter_map(|pid| pid.trim().parse::<i32>().ok())
        {
            // SAFETY: kill(2) with a pid read from the group; it shares no memory with us.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        match fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(error) if error.raw_os_error() == Some(libc::EBUSY) => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(error) => return Err(error),
        }
    }
    fs::remove_dir(dir)
}

/// Makes the v2 parent group with the controllers handed down to its children.
///
/// A v2 group can hand controllers down only while it holds no process itself, so when the
/// engine's own group refuses (it holds the engine), the engine moves into a leaf of its own,
/// `engine`, first: the usual dance of a container's init that manages cgroups.
fn prepare_v2_parent(parent: &Path) -> io::Result<()> {
    let enable = "+memory +pids +cpu";
    if parent.join("cgroup.subtree_control").exists()
        && fs::read_to_string(parent.join("cgroup.subtree_control"))?
            .split_whitespace()
            .filter(|c| V1_CONTROLLERS.contains(c))
            .count()
            == V1_CONTROLLERS.len()
    {
        return Ok(());
    }
    let base = parent
        .parent()
        .ok_or_else(|| io::Error::other("the cgroup parent has no parent"))?;
    if let Err(error) = fs::write(base.join("cgroup.subtree_control"), enable) {
        if error.raw_os_error() != Some(libc::EBUSY) {
            return Err(error);
        }
        let leaf = base.join("engine");
        match fs::create_dir(&leaf) {
            Err(error) if error.kind() != io::ErrorKind::AlreadyExists => return Err(error),
            _ => {}
        }
        for pid in fs::read_to_string(base.join("cgroup.procs"))?.lines() {
            // A process may have exited since the list was read.
            let _ = fs::write(leaf.join("cgroup.procs"), pid.trim());
        }
        fs::write(base.join("cgroup.subtree_control"), enable)?;
    }
    match fs::create_dir(parent) {
        Err(error) if error.kind() != io::ErrorKind::AlreadyExists => return Err(error),
        _ => {}
    }
    fs::write(parent.join("cgroup.subtree_control"), enable)
}

fn write(dir: &Path, file: &str, value: impl ToString) -> io::Result<()> {
    fs::write(dir.join(file), value.to_string()).map_err(|error| {
        io::Error::new(
            error.kind(),
            format!("writing {}: {error}", dir.join(file).display()),
        )
    })
}

/// The number after `name` in a flat keyed file such as `memory.events`; 0 if it is not there.
fn read_field(path: &Path, name: &str) -> u64 {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .find_map(|line| {
            let (key, value) = line.split_once(' ')?;
            (key == name).then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0)
}

fn is_cgroup2(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `stat` is plain data the kernel fills; `path` is a NUL-terminated string.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the duration of the call.
    let rc = unsafe { libc::statfs(path.as_ptr(), &mut stat) };
    #[allow(clippy::unnecessary_cast)]
    let kind = stat.f_type as i64;
    rc == 0 && kind == CGROUP2_SUPER_MAGIC
}

/// What the machine says of its cgroups, read once by [`Cgroups::detect`].
struct Machine {
    /// Where the cgroup file systems are mounted: [`CGROUP_ROOT`].
    root: PathBuf,
    /// Whether it is a cgroup2 file system.
    root_is_v2: bool,
    /// `/proc/self/cgroup`.
    own: String,
    /// `/proc/self/mountinfo`.
    mountinfo: String,
}

/// One line of `/proc/self/mountinfo`, the fields used here.
struct Mount<'a> {
    /// The directory of the file system that is mounted (not `/` where only a subtree is).
    root: &'a str,
    point: &'a Path,
    kind: &'a str,
    options: &'a str,
}

fn mounts(mountinfo: &str) -> impl Iterator<Item = Mount<'_>> {
    mountinfo.lines().filter_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        let mut before = before.split_whitespace().skip(3);
        let (root, point) = (before.next()?, before.next()?);
        let mut after = after.split_whitespace();
        let (kind, _source, options) = (after.next()?, after.next()?, after.next()?);
        Some(Mount {
            root,
            point: Path::new(point),
            kind,
            options,
        })
    })
}

/// A group's path below the mount that shows the hierarchy from `root` on.
fn relative<'a>(path: &'a str, root: &str) -> &'a str {
    path.strip_prefix(root)
        .filter(|rest| rest.is_empty() || rest.starts_with('/') || root == "/")
        .unwrap_or(path)
        .trim_start_matches('/')
}

/// A short stable tag for a workspace root (FNV-1a), the same for every run of any engine
/// build, so a new engine finds the groups of a dead one.
pub(crate) fn tag(root: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in root.as_os_str().as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_files_are_read_by_field() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("memory.events");
        fs::write(&path, "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n").expect("written");
        assert_eq!(read_field(&path, "oom_kill"), 1);
        assert_eq!(read_field(&path, "max"), 3);
        assert_eq!(read_field(&path, "missing"), 0);
        assert_eq!(read_field(&dir.path().join("absent"), "max"), 0);
    }

    /// This project's test machines: v1 controllers, an empty v2 beside them.
    const HYBRID_MOUNTS: &str = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn a_hybrid_machine_uses_the_v1_hierarchies_under_the_engine_s_groups() {
        let machine = Machine {
            root: PathBuf::from(CGROUP_ROOT),
            root_is_v2: false,
            own: "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/0e00\n1:cpu:/\n0::/\n".into(),
            mountinfo: HYBRID_MOUNTS.into(),
        };
        let Ok(Cgroups::V1 { parents }) = Cgroups::choose(&machine, "t") else {
            panic!("v1 expected");
        };
        assert_eq!(
            parents,
            [
                PathBuf::from("/sys/fs/cgroup/memory/process_api/0e00/overture-t"),
                PathBuf::from("/sys/fs/cgroup/pids/overture-t"),
                PathBuf::from("/sys/fs/cgroup/cpu/overture-t"),
            ]
        );
    }

    /// A cgroup2 root in a temporary directory, the engine's group in it listing `controllers`.
    fn v2_machine(controllers: &str) -> (tempfile::TempDir, Machine) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let group = dir.path().join("system.slice/overture.service");
        fs::create_dir_all(&group).expect("the engine's group");
        fs::write(group.join("cgroup.controllers"), controllers).expect("written");
        // The machine has them all; only what the engine's group may use counts.
        fs::write(
            dir.path().join("cgroup.controllers"),
            "cpuset cpu io memory hugetlb pids rdma misc\n",
        )
        .expect("written");
        let machine = Machine {
            root: dir.path().to_owned(),
            root_is_v2: true,
            own: "0::/system.slice/overture.service\n".into(),
            mountinfo: format!(
                "25 18 0:22 / {} rw - cgroup2 cgroup2 rw,nsdelegate\n",
                dir.path().display()
            ),
        };
        (dir, machine)
    }

    #[test]
    fn a_v2_machine_with_the_controllers_uses_v2() {
        let (dir, machine) = v2_machine("cpuset cpu io memory pids\n");
        let Ok(Cgroups::V2 { parent }) = Cgroups::choose(&machine, "t") else {
            panic!("v2 expected");
        };
        assert_eq!(
            parent,
            dir.path().join("system.slice/overture.service/overture-t")
        );
    }

    #[test]
    fn a_v2_group_not_given_a_controller_names_the_ones_it_lacks() {
        let (dir, machine) = v2_machine("cpu memory\n");
        let refused = Cgroups::choose(&machine, "t").expect_err("no pids controller");
        assert!(
            refused.contains("lacks the pids controller(s) in the engine's group"),
            "{refused}"
        );
        let listed = dir
            .path()
            .join("system.slice/overture.service/cgroup.controllers");
        assert!(refused.contains(&listed.display().to_string()), "{refused}");
        let (_dir, bare) = v2_machine("");
        let refused = Cgroups::choose(&bare, "t").expect_err("no controller");
        assert!(
            refused.contains("lacks the memory, pids, cpu controller(s)"),
            "{refused}"
        );
    }

    #[test]
    fn a_combined_v1_hierarchy_mounted_from_a_subtree_is_found() {
        let machine = Machine {
            root: PathBuf::from(CGROUP_ROOT),
            root_is_v2: false,
            own: "5:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n3:pids:/docker/abc\n".into(),
            mountinfo:
                "1 0 0:1 /docker/abc /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
2 0 0:2 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
3 0 0:3 /docker/abc /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids
"
                .into(),
        };
        let Ok(Cgroups::V1 { parents }) = Cgroups::choose(&machine, "t") else {
            panic!("v1 expected");
        };
        assert_eq!(
            parents[2],
            PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/overture-t")
        );
        assert_eq!(
            parents[0],
            PathBuf::from("/sys/fs/cgroup/memory/overture-t")
        );
    }

    #[test]
    fn no_cgroups_at_all_says_what_is_missing() {
        let machine = Machine {
            root: PathBuf::from(CGROUP_ROOT),
            root_is_v2: false,
            own: "0::/\n".into(),
            mountinfo: String::new(),
        };
        let refused = Cgroups::choose(&machine, "t").expect_err("nothing to use");
        assert!(
            refused.contains("no cgroup v1 hierarchy for `memory`"),
            "{refused}"
        );
    }

    #[test]
    fn tags_are_stable_and_tell_roots_apart() {
        assert_eq!(tag(Path::new("/a")), tag(Path::new("/a")));
        assert_ne!(tag(Path::new("/a")), tag(Path::new("/b")));
        assert_eq!(tag(Path::new("/a")).len(), 16);
    }
}
