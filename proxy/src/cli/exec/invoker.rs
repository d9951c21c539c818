//! Who the confined command runs as. In order: the policy's `process.run_as_user/group`;
//! `--user NAME|UID`; sluice's own user when sluice is not root; through `sudo`, the user
//! `SUDO_UID`/`SUDO_GID` name; as plain root, the owner of the working directory (the user
//! whose files the command works on, so that it can write them), but only a normal user's
//! uid (`UID_MIN` from /etc/login.defs up to 65533): its primary group, `nogroup` without an
//! account, never the directory's group (whoever owns the directory sets that). Never root
//! and never root's group: where none of these gives a user but root or a system account
//! (a working directory root or a service owns), sluice refuses and says how to choose.
//! Pure: the caller reads the ids, the directory's owner, /etc/passwd and /etc/login.defs.

use std::path::Path;

use crate::policy::model::{RunAs, Sandbox};

/// The uid and gid of the unprivileged sandbox user.
pub const NOBODY: u32 = 65534;

/// The ids sluice runs with and the `sudo` variables it inherited.
#[derive(Clone, Debug, Default)]
pub struct Invocation {
    pub euid: u32,
    pub egid: u32,
    pub sudo_uid: Option<String>,
    pub sudo_gid: Option<String>,
}

impl Invocation {
    pub fn current() -> Invocation {
        Invocation {
            euid: rustix::process::geteuid().as_raw(),
            egid: rustix::process::getegid().as_raw(),
            sudo_uid: std::env::var("SUDO_UID").ok(),
            sudo_gid: std::env::var("SUDO_GID").ok(),
        }
    }

    /// `sudo`'s caller when root through `sudo` (never root itself), else none.
    fn sudo_user(&self) -> Option<(u32, u32)> {
        let id = |v: &Option<String>| v.as_deref()?.parse::<u32>().ok().filter(|n| *n != 0);
        Some((id(&self.sudo_uid)?, id(&self.sudo_gid)?))
    }
}

/// One line of /etc/passwd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Account {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: String,
}

/// The accounts of a passwd(5) file's contents (lines that do not parse are skipped).
pub fn accounts(passwd: &str) -> Vec<Account> {
    passwd
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(':').collect();
            if f.len() < 6 || f[0].is_empty() {
                return None;
            }
            Some(Account {
                name: f[0].to_string(),
                uid: f[2].parse().ok()?,
                gid: f[3].parse().ok()?,
                home: f[5].to_string(),
            })
        })
        .collect()
}

/// Where the command's user came from, as said at start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Policy,
    Flag,
    Own,
    Sudo,
    WorkdirOwner,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Policy => "the policy's process.run_as_user",
            Source::Flag => "chosen by --user",
            Source::Own => "sluice's own user",
            Source::Sudo => "the user who ran sudo",
            Source::WorkdirOwner => "the owner of the working directory (--user chooses another)",
        }
    }
}

/// The command's user.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chosen {
    pub uid: u32,
    pub gid: u32,
    pub source: Source,
}

/// Why no user could be chosen: sluice refuses to start the command.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum NoUser {
    #[error("--user {0}: no such user in /etc/passwd (give a user name or a numeric uid)")]
    Unknown(String),
    #[error("--user {0}: the command never runs as root")]
    Root(String),
    #[error("--user {0}: not a uid a process can have")]
    Invalid(String),
    #[error(
        "--user {given}: sluice runs as uid {own}, and only root can run the command as another user"
    )]
    NotRoot { given: String, own: u32 },
    #[error("--user {given} conflicts with the policy's process.run_as_user (uid {policy})")]
    Policy { given: String, policy: u32 },
    #[error(
        "the working directory {dir} is owned by root, and the command never runs as root: pass --user NAME (the user whose files the command works on, or --user nobody), or run sluice exec from a directory that user owns"
    )]
    RootOwnedWorkdir { dir: String },
    #[error(
        "the working directory {dir} is owned by uid {uid}, not a normal user's (uid {uid_min} to 65533, UID_MIN from /etc/login.defs): sluice chooses only a normal user by itself; pass --user NAME (the user whose files the command works on, or --user nobody)"
    )]
    SystemOwnedWorkdir { dir: String, uid: u32, uid_min: u32 },
    #[error(
        "{who}: its group is root's (gid 0), and the command never runs with root's group: choose a user whose primary group is not root's (--user NAME)"
    )]
    RootGroup { who: String },
}

/// The first uid of a normal user when /etc/login.defs does not say.
pub const DEFAULT_UID_MIN: u32 = 1000;

/// `UID_MIN` from a login.defs(5) file's contents, else [`DEFAULT_UID_MIN`].
pub fn uid_min(login_defs: &str) -> u32 {
    login_defs
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some("UID_MIN")).then(|| words.next()?.parse().ok())?
        })
        .next_back()
        .unwrap_or(DEFAULT_UID_MIN)
}

/// What the choice is made from.
#[derive(Debug)]
pub struct Inputs<'a> {
    pub sandbox: &'a Sandbox,
    pub invocation: &'a Invocation,
    /// `--user`, as given.
    pub flag: Option<&'a str>,
    pub workdir: &'a Path,
    /// The working directory's owner (its group is never used: whoever owns the directory
    /// sets that).
    pub workdir_owner: u32,
    /// The first uid of a normal user (`UID_MIN`).
    pub uid_min: u32,
    pub accounts: &'a [Account],
}

/// `--user`'s uid and gid: a name from /etc/passwd, or a number (with its account's group
/// when it has one, else `nogroup`, 65534). `u32::MAX` is refused: it is `-1`, which
/// `setresuid` reads as "leave unchanged".
fn resolve(flag: &str, accounts: &[Account]) -> Result<(u32, u32), NoUser> {
    let by_name = accounts.iter().find(|a| a.name == flag);
    let ids = match (by_name, flag.parse::<u32>()) {
        (Some(a), _) => (a.uid, a.gid),
        (None, Ok(uid)) => (uid, primary_gid(uid, accounts).unwrap_or(NOBODY)),
        (None, Err(_)) => return Err(NoUser::Unknown(flag.to_string())),
    };
    if ids.0 == 0 {
        return Err(NoUser::Root(flag.to_string()));
    }
    if ids.0 == u32::MAX || ids.1 == u32::MAX {
        return Err(NoUser::Invalid(flag.to_string()));
    }
    Ok(ids)
}

fn primary_gid(uid: u32, accounts: &[Account]) -> Option<u32> {
    accounts.iter().find(|a| a.uid == uid).map(|a| a.gid)
}

/// The command's user and group, or why there is none but root (or root's group).
pub fn choose(i: &Inputs<'_>) -> Result<Chosen, NoUser> {
    let c = choose_any_group(i)?;
    if c.gid == 0 {
        let who = match (c.source, i.flag) {
            (Source::Flag, Some(f)) => format!("--user {f}"),
            _ => format!(
                "{} ({})",
                describe(c.uid, c.gid, i.accounts),
                c.source.as_str()
            ),
        };
        return Err(NoUser::RootGroup { who });
    }
    Ok(c)
}

fn choose_any_group(i: &Inputs<'_>) -> Result<Chosen, NoUser> {
    let flag = i.flag.map(|f| resolve(f, i.accounts)).transpose()?;
    let pick = |r: Option<RunAs>| match r {
        Some(RunAs::Id(n)) => Some(n),
        Some(RunAs::Sandbox) => Some(NOBODY),
        None => None,
    };
    let group = pick(i.sandbox.run_as_group);
    let chosen = |(uid, gid): (u32, u32), source| Chosen {
        uid,
        gid: group.unwrap_or(gid),
        source,
    };
    if let Some(uid) = pick(i.sandbox.run_as_user) {
        if let (Some(given), Some((f, _))) = (i.flag, flag)
            && f != uid
        {
            return Err(NoUser::Policy {
                given: given.to_string(),
                policy: uid,
            });
        }
        let gid = if i.sandbox.run_as_user == Some(RunAs::Sandbox) {
            NOBODY
        } else {
            primary_gid(uid, i.accounts).unwrap_or(NOBODY)
        };
        return Ok(chosen((uid, gid), Source::Policy));
    }
    let inv = i.invocation;
    if let (Some(given), Some(ids)) = (i.flag, flag) {
        if inv.euid != 0 && ids.0 != inv.euid {
            return Err(NoUser::NotRoot {
                given: given.to_string(),
                own: inv.euid,
            });
        }
        return Ok(chosen(ids, Source::Flag));
    }
    if inv.euid != 0 {
        return Ok(chosen((inv.euid, inv.egid), Source::Own));
    }
    if let Some(ids) = inv.sudo_user() {
        return Ok(chosen(ids, Source::Sudo));
    }
    let owner = i.workdir_owner;
    let dir = i.workdir.display().to_string();
    if owner == 0 {
        return Err(NoUser::RootOwnedWorkdir { dir });
    }
    // A service's directory (postgres's data) is not a user's work: only a normal uid.
    if owner < i.uid_min || owner >= NOBODY {
        return Err(NoUser::SystemOwnedWorkdir {
            dir,
            uid: owner,
            uid_min: i.uid_min,
        });
    }
    // Without an account: `nogroup`, never the directory's group.
    let gid = primary_gid(owner, i.accounts).unwrap_or(NOBODY);
    Ok(chosen((owner, gid), Source::WorkdirOwner))
}

/// How the command's user is named at start: `alice (uid 1000, gid 1000)`.
pub fn describe(uid: u32, gid: u32, accounts: &[Account]) -> String {
    match accounts.iter().find(|a| a.uid == uid) {
        Some(a) => format!("{} (uid {uid}, gid {gid})", a.name),
        None => format!("uid {uid} (gid {gid}, no account in /etc/passwd)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\nalice:x:1000:1001::/home/alice:/bin/bash\nbroken line\n";

    fn inv(euid: u32, sudo: Option<(&str, &str)>) -> Invocation {
        Invocation {
            euid,
            egid: euid,
            sudo_uid: sudo.map(|s| s.0.to_string()),
            sudo_gid: sudo.map(|s| s.1.to_string()),
        }
    }

    fn pick(
        sandbox: &Sandbox,
        invocation: &Invocation,
        flag: Option<&str>,
        owner: u32,
    ) -> Result<(u32, u32, Source), NoUser> {
        let accounts = accounts(PASSWD);
        choose(&Inputs {
            sandbox,
            invocation,
            flag,
            workdir: Path::new("/w"),
            workdir_owner: owner,
            uid_min: DEFAULT_UID_MIN,
            accounts: &accounts,
        })
        .map(|c| (c.uid, c.gid, c.source))
    }

    #[test]
    fn as_root_the_owner_of_the_working_directory_never_root() {
        let none = Sandbox::default();
        let root = inv(0, None);
        // Owned by alice: alice, with her primary group.
        assert_eq!(
            pick(&none, &root, None, 1000),
            Ok((1000, 1001, Source::WorkdirOwner))
        );
        // An owner without an account: its uid, `nogroup`, never the directory's group.
        assert_eq!(
            pick(&none, &root, None, 4242),
            Ok((4242, NOBODY, Source::WorkdirOwner))
        );
        // Owned by root: no safe choice.
        let no = pick(&none, &root, None, 0).unwrap_err();
        assert!(no.to_string().contains("pass --user NAME"), "{no}");
        // --user chooses, by name or number, and never root.
        assert_eq!(
            pick(&none, &root, Some("nobody"), 0),
            Ok((NOBODY, NOBODY, Source::Flag))
        );
        assert_eq!(
            pick(&none, &root, Some("1000"), 0),
            Ok((1000, 1001, Source::Flag))
        );
        assert_eq!(
            pick(&none, &root, Some("777"), 0),
            Ok((777, NOBODY, Source::Flag))
        );
        // -1 would leave the ids unchanged (root): refused.
        assert_eq!(
            pick(&none, &root, Some("4294967295"), 0),
            Err(NoUser::Invalid("4294967295".to_string()))
        );
        // A system account's directory, or nobody's: refused, with or without an account.
        for system in [1, 999, 65534, 70000] {
            let no = pick(&none, &root, None, system).unwrap_err();
            assert!(matches!(no, NoUser::SystemOwnedWorkdir { .. }), "{no}");
            assert!(no.to_string().contains("pass --user NAME"), "{no}");
        }
        // Named, a system account is the operator's choice.
        assert_eq!(
            pick(&none, &root, Some("999"), 0),
            Ok((999, NOBODY, Source::Flag))
        );
        for r in ["root", "0"] {
            assert_eq!(
                pick(&none, &root, Some(r), 1000),
                Err(NoUser::Root(r.to_string()))
            );
        }
        assert_eq!(
            pick(&none, &root, Some("mallory"), 1000),
            Err(NoUser::Unknown("mallory".to_string()))
        );
    }

    #[test]
    fn sudo_and_a_normal_user_are_the_invoker() {
        let none = Sandbox::default();
        assert_eq!(
            pick(&none, &inv(1000, None), None, 0),
            Ok((1000, 1000, Source::Own))
        );
        assert_eq!(
            pick(&none, &inv(0, Some(("1001", "1002"))), None, 0),
            Ok((1001, 1002, Source::Sudo))
        );
        // sudo from root, or garbage: the directory's owner, never root.
        assert_eq!(
            pick(&none, &inv(0, Some(("0", "0"))), None, 1000),
            Ok((1000, 1001, Source::WorkdirOwner))
        );
        assert!(pick(&none, &inv(0, Some(("x", "1"))), None, 0).is_err());
        // Not root: --user may only name itself.
        assert_eq!(
            pick(&none, &inv(1000, None), Some("alice"), 0),
            Ok((1000, 1001, Source::Flag))
        );
        assert!(matches!(
            pick(&none, &inv(1000, None), Some("nobody"), 0),
            Err(NoUser::NotRoot { .. })
        ));
    }

    #[test]
    fn the_policy_decides_first_and_conflicts_with_another_user() {
        let policy = Sandbox {
            run_as_user: Some(RunAs::Id(1000)),
            run_as_group: Some(RunAs::Sandbox),
            ..Sandbox::default()
        };
        let root = inv(0, Some(("1001", "1002")));
        assert_eq!(
            pick(&policy, &root, None, 0),
            Ok((1000, NOBODY, Source::Policy))
        );
        assert_eq!(
            pick(&policy, &root, Some("alice"), 0),
            Ok((1000, NOBODY, Source::Policy))
        );
        assert!(matches!(
            pick(&policy, &root, Some("nobody"), 0),
            Err(NoUser::Policy { .. })
        ));
        let sandbox_user = Sandbox {
            run_as_user: Some(RunAs::Sandbox),
            ..Sandbox::default()
        };
        assert_eq!(
            pick(&sandbox_user, &inv(0, None), None, 0),
            Ok((NOBODY, NOBODY, Source::Policy))
        );
    }

    #[test]
    fn never_root_s_group() {
        let passwd = "op:x:1500:0::/home/op:/bin/sh\n";
        let accounts = accounts(passwd);
        let root = inv(0, None);
        let none = Sandbox::default();
        let with = |flag, sandbox: &Sandbox| {
            choose(&Inputs {
                sandbox,
                invocation: &root,
                flag,
                workdir: Path::new("/w"),
                workdir_owner: 1500,
                uid_min: DEFAULT_UID_MIN,
                accounts: &accounts,
            })
        };
        for flag in [None, Some("op"), Some("1500")] {
            let no = with(flag, &none).unwrap_err();
            assert!(matches!(no, NoUser::RootGroup { .. }), "{no}");
            assert!(no.to_string().contains("root's group"), "{no}");
        }
        let root_group = Sandbox {
            run_as_user: Some(RunAs::Id(1500)),
            run_as_group: Some(RunAs::Id(0)),
            ..Sandbox::default()
        };
        assert!(with(None, &root_group).is_err());
    }

    #[test]
    fn uid_min_from_login_defs() {
        assert_eq!(uid_min(""), 1000);
        assert_eq!(
            uid_min("# UID_MIN 5\nUID_MIN\t\t 2000\nSYS_UID_MIN 100\n"),
            2000
        );
        assert_eq!(uid_min("UID_MIN x\n"), 1000);
    }

    #[test]
    fn accounts_and_names() {
        let a = accounts(PASSWD);
        assert_eq!(a.len(), 3);
        assert_eq!(a[2].home, "/home/alice");
        assert_eq!(describe(1000, 1001, &a), "alice (uid 1000, gid 1001)");
        assert_eq!(
            describe(5, 5, &a),
            "uid 5 (gid 5, no account in /etc/passwd)"
        );
    }
}
