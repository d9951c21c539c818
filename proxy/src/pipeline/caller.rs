//! The caller of a connection, found from its socket, in the two shapes sluice needs: what
//! policy matches on (exe, ancestor exes, cmdline paths) and what audit records (pids,
//! cmdlines).
//!
//! Owns the call into `sluice-identity` (on a blocking thread: it reads /proc and talks
//! netlink) and the conversion of its answer. A failed lookup is an error the pipeline turns
//! into a denial: sluice never guesses who is calling (fail closed).

use std::net::SocketAddr;

use sluice_identity::Identity;

use super::Shared;
use crate::audit;
use crate::policy;

/// A caller as policy and audit see it.
#[derive(Clone, Debug)]
pub struct Known {
    pub exe: String,
    pub ancestors: Vec<String>,
    pub cmdline_paths: Vec<String>,
    pub audit: audit::Caller,
}

impl Known {
    pub fn policy_caller(&self) -> policy::Caller<'_> {
        policy::Caller {
            exe: &self.exe,
            ancestors: &self.ancestors,
            cmdline: &self.cmdline_paths,
        }
    }

    pub fn pid(&self) -> u32 {
        self.audit.process.pid
    }
}

/// Identifies the process at the other end of an accepted connection.
pub async fn identify(
    shared: &Shared,
    peer: SocketAddr,
    local: SocketAddr,
) -> Result<Known, String> {
    // The lookup is ~100 µs of /proc and netlink reads. `block_in_place` runs it on this
    // worker (the runtime moves other tasks away) instead of handing it to another thread and
    // back, which costs two wake-ups per connection on a busy machine.
    let resolver = &shared.identity;
    let looked_up = if tokio::runtime::Handle::current().runtime_flavor()
        == tokio::runtime::RuntimeFlavor::MultiThread
    {
        tokio::task::block_in_place(|| resolver.lookup(peer, local))
    } else {
        resolver.lookup(peer, local)
    };
    match looked_up {
        Ok(identity) => Ok(known(&identity)),
        Err(e) => Err(e.to_string()),
    }
}

/// A command line as audit records it: query strings of URL arguments and credential
/// placeholders are cut (queries and placeholders never reach a log; spec §7.2).
fn audit_cmdline(argv: &[String]) -> Vec<String> {
    argv.iter()
        .map(|a| {
            let a = match (a.contains("://"), a.find('?')) {
                (true, Some(q)) => format!("{}?[query]", &a[..q]),
                _ => a.clone(),
            };
            if a.contains("openshell:resolve:env:") || a.contains("OPENSHELL-RESOLVE-ENV-") {
                "[placeholder]".to_string()
            } else {
                a
            }
        })
        .collect()
}

fn known(id: &Identity) -> Known {
    Known {
        exe: id.exe.clone(),
        // An ancestor whose exe the kernel would not show (pid 1 in some sandboxes) matches
        // nothing and says nothing: left out.
        ancestors: id
            .ancestors
            .iter()
            .filter(|a| !a.exe.is_empty())
            .map(|a| a.exe.clone())
            .collect(),
        cmdline_paths: id.cmdline_paths.clone(),
        audit: audit::Caller {
            process: audit::Process {
                pid: id.pid,
                exe: id.exe.clone(),
                cmdline: audit_cmdline(&id.cmdline),
                uid: Some(id.uid),
            },
            ancestors: id
                .ancestors
                .iter()
                .map(|a| audit::Process {
                    pid: a.pid,
                    exe: a.exe.clone(),
                    cmdline: audit_cmdline(&a.cmdline),
                    uid: None,
                })
                .collect(),
        },
    }
}
