//! Forks and exits as the kernel announces them: the netlink process connector
//! (`NETLINK_CONNECTOR`, `CN_IDX_PROC`), for the sibling tables `siblings` keeps.
//!
//! It owns the socket, the subscription and the parsing of events; it does not decide what an
//! event means for a kept table (`siblings` does). The kernel queues each event on the socket
//! while it forks or reaps, before the new process runs, so once the socket has been read
//! empty every fork and exit before that moment is known. It can also drop events: when the
//! socket's buffer is full (the next read fails with `ENOBUFS`) and when it cannot allocate
//! the message (nothing is queued then). Every event carries its CPU's sequence number, one
//! more than the last on that CPU, so a dropped one shows as a gap; either way the reader is
//! told that events were lost ([`Drained::Lost`]), and nothing kept from before may be used.
//!
//! Subscribing needs `CAP_NET_ADMIN` in the initial user namespace, and sluice in the initial
//! PID and network namespaces: elsewhere [`Connector::open`] fails and sluice reads every
//! sibling's table at every lookup, as without it.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use rustix::io::Errno;
use rustix::net::netlink::SocketAddrNetlink;
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};

/// `CN_IDX_PROC` / `CN_VAL_PROC`: the process connector's id, and its multicast group.
const CN_IDX_PROC: u32 = 1;
const CN_VAL_PROC: u32 = 1;
/// `PROC_CN_MCAST_LISTEN`.
const MCAST_LISTEN: u32 = 1;
/// `NLMSG_DONE`, the type the connector's messages carry.
const NLMSG_DONE: u16 = 3;
/// `struct nlmsghdr` and `struct cn_msg`, before the `struct proc_event`.
const NLMSG_HEADER: usize = 16;
const CN_MSG_HEADER: usize = 20;
/// `proc_event`: `what`, `cpu`, `timestamp_ns`, then the event's fields.
const EVENT_DATA: usize = NLMSG_HEADER + CN_MSG_HEADER + 16;
/// `what` of the events read here; others (exec, uid, comm, ...) change no fd table.
const PROC_EVENT_NONE: u32 = 0;
const PROC_EVENT_FORK: u32 = 1;
const PROC_EVENT_EXIT: u32 = 0x8000_0000;
/// The socket's buffer: a few seconds of a busy host's forks and exits between two reads.
const RECEIVE_BUFFER: usize = 4 << 20;
/// How long the kernel's answer to the subscription is waited for.
const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(1);

/// What one event says about a process (a thread group: events about other threads are
/// left out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// A new process has this pid.
    Forked(u32),
    /// The process with this pid is exiting (its pid is free once it is reaped).
    Exited(u32),
}

/// The result of reading the socket empty.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Drained {
    /// Every event up to now, in the order queued.
    All(Vec<Event>),
    /// Some were dropped: nothing known from before may be used.
    Lost,
}

/// One event message, parsed: the CPU and sequence number it carries, and what it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Message {
    pub(crate) cpu: u32,
    pub(crate) sequence: u32,
    pub(crate) says: Says,
}

/// What a message says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Says {
    /// A fork or an exit of a process.
    Event(Event),
    /// The answer to a subscription, with its error (0: subscribed).
    Answer(u32),
    /// Something that changes no fd table: a new thread, a thread's exit, an exec, ...
    Nothing,
}

/// Parses one connector message (`nlmsghdr`, `cn_msg`, `proc_event`); `None` when it is
/// not one of the process connector's.
pub(crate) fn parse(message: &[u8]) -> Option<Message> {
    let u32_at = |at: usize| -> Option<u32> {
        let bytes = message.get(at..at + 4)?;
        Some(u32::from_ne_bytes(bytes.try_into().ok()?))
    };
    let (idx, val) = (u32_at(NLMSG_HEADER)?, u32_at(NLMSG_HEADER + 4)?);
    if (idx, val) != (CN_IDX_PROC, CN_VAL_PROC) {
        return None;
    }
    let sequence = u32_at(NLMSG_HEADER + 8)?;
    let what = u32_at(NLMSG_HEADER + CN_MSG_HEADER)?;
    let cpu = u32_at(NLMSG_HEADER + CN_MSG_HEADER + 4)?;
    // fork: parent pid, parent tgid, child pid, child tgid; exit: pid, tgid, ...; the
    // answer: its error.
    let says = match what {
        PROC_EVENT_NONE => Says::Answer(u32_at(EVENT_DATA)?),
        PROC_EVENT_FORK => {
            let (pid, tgid) = (u32_at(EVENT_DATA + 8)?, u32_at(EVENT_DATA + 12)?);
            if pid == tgid {
                Says::Event(Event::Forked(pid))
            } else {
                Says::Nothing
            }
        }
        PROC_EVENT_EXIT => {
            let (pid, tgid) = (u32_at(EVENT_DATA)?, u32_at(EVENT_DATA + 4)?);
            if pid == tgid {
                Says::Event(Event::Exited(pid))
            } else {
                Says::Nothing
            }
        }
        _ => Says::Nothing,
    };
    Some(Message {
        cpu,
        sequence,
        says,
    })
}

/// The last sequence number seen from each CPU: the kernel numbers each CPU's events one
/// after another, so a number that does not follow the last says events were dropped.
#[derive(Debug, Default)]
pub(crate) struct Numbering(HashMap<u32, u32>);

impl Numbering {
    /// Notes the number of a message from `cpu`; `false` when it does not follow the last
    /// one noted from that CPU (the first from a CPU follows nothing, and passes).
    pub(crate) fn follows(&mut self, cpu: u32, sequence: u32) -> bool {
        self.0
            .insert(cpu, sequence)
            .is_none_or(|last| sequence == last.wrapping_add(1))
    }

    /// Forgets every number (the kernel dropped messages: nothing follows from before).
    pub(crate) fn clear(&mut self) {
        self.0.clear();
    }
}

/// The subscribed socket, and the last sequence number seen from each CPU.
#[derive(Debug)]
pub(crate) struct Connector {
    socket: OwnedFd,
    last: Numbering,
    buffer: Vec<u8>,
}

impl Connector {
    /// Subscribes to the process events: fails where sluice may not (see the module
    /// documentation), or when the kernel does not answer the subscription.
    pub(crate) fn open() -> std::io::Result<Self> {
        let socket = rustix::net::socket_with(
            AddressFamily::NETLINK,
            SocketType::DGRAM,
            SocketFlags::CLOEXEC,
            Some(rustix::net::netlink::CONNECTOR),
        )?;
        rustix::net::bind(&socket, &SocketAddrNetlink::new(0, CN_IDX_PROC))?;
        if rustix::net::sockopt::set_socket_recv_buffer_size_force(&socket, RECEIVE_BUFFER).is_err()
        {
            rustix::net::sockopt::set_socket_recv_buffer_size(&socket, RECEIVE_BUFFER)?;
        }
        let words: [u32; 3] = [CN_IDX_PROC, CN_VAL_PROC, 0];
        let length = NLMSG_HEADER + CN_MSG_HEADER + 4;
        let mut request = Vec::with_capacity(length);
        request.extend_from_slice(&u32::try_from(length).unwrap_or(u32::MAX).to_ne_bytes());
        request.extend_from_slice(&NLMSG_DONE.to_ne_bytes());
        request.extend_from_slice(&[0; 10]); // flags, sequence, port (the kernel's)
        for word in words {
            request.extend_from_slice(&word.to_ne_bytes()); // id, then the message's seq
        }
        request.extend_from_slice(&0u32.to_ne_bytes()); // ack
        request.extend_from_slice(&4u16.to_ne_bytes()); // length of the operation
        request.extend_from_slice(&0u16.to_ne_bytes()); // flags
        request.extend_from_slice(&MCAST_LISTEN.to_ne_bytes());
        rustix::net::send(&socket, &request, SendFlags::empty())?;
        let mut connector = Self {
            socket,
            last: Numbering::default(),
            buffer: vec![0; 256],
        };
        connector.await_answer()?;
        Ok(connector)
    }

    /// Waits for the kernel's answer to the subscription: without one, the socket may hear
    /// nothing (another network namespace).
    fn await_answer(&mut self) -> std::io::Result<()> {
        let deadline = Instant::now() + SUBSCRIBE_TIMEOUT;
        loop {
            match rustix::net::recv(&self.socket, &mut self.buffer[..], RecvFlags::DONTWAIT) {
                Ok((length, _)) => {
                    let Some(parsed) = parse(self.buffer.get(..length).unwrap_or_default()) else {
                        continue;
                    };
                    // Numbered like the events: noted, so that gaps after it show.
                    self.last.follows(parsed.cpu, parsed.sequence);
                    match parsed.says {
                        Says::Answer(0) => return Ok(()),
                        Says::Answer(error) => {
                            return Err(std::io::Error::other(format!(
                                "the process connector refused the subscription (error {error})"
                            )));
                        }
                        Says::Event(_) | Says::Nothing => {}
                    }
                }
                Err(Errno::AGAIN) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(Errno::AGAIN) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "the process connector did not answer the subscription",
                    ));
                }
                Err(err) => return Err(err.into()),
            }
        }
    }

    /// Another descriptor of the socket, for waiting until it has something to read.
    pub(crate) fn try_clone_fd(&self) -> std::io::Result<OwnedFd> {
        Ok(rustix::io::fcntl_dupfd_cloexec(&self.socket, 0)?)
    }

    /// Reads every message queued so far; `Err` when the socket broke (then it is useless).
    pub(crate) fn drain(&mut self) -> std::io::Result<Drained> {
        let mut events = Vec::new();
        let mut lost = false;
        loop {
            match rustix::net::recv(&self.socket, &mut self.buffer[..], RecvFlags::DONTWAIT) {
                Ok((length, _)) => {
                    let Some(parsed) = parse(self.buffer.get(..length).unwrap_or_default()) else {
                        continue;
                    };
                    if !self.last.follows(parsed.cpu, parsed.sequence) {
                        lost = true;
                    }
                    if let Says::Event(event) = parsed.says {
                        events.push(event);
                    }
                }
                Err(Errno::AGAIN) => break,
                Err(Errno::NOBUFS) => {
                    // Dropped for want of room: numbering is checked afresh after it.
                    lost = true;
                    self.last.clear();
                }
                Err(Errno::INTR) => {}
                Err(err) => return Err(err.into()),
            }
        }
        Ok(if lost {
            Drained::Lost
        } else {
            Drained::All(events)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connector message as the kernel lays it out.
    fn message(cpu: u32, sequence: u32, what: u32, data: [u32; 4]) -> Vec<u8> {
        let mut m = vec![0u8; EVENT_DATA];
        m[NLMSG_HEADER..NLMSG_HEADER + 4].copy_from_slice(&CN_IDX_PROC.to_ne_bytes());
        m[NLMSG_HEADER + 4..NLMSG_HEADER + 8].copy_from_slice(&CN_VAL_PROC.to_ne_bytes());
        m[NLMSG_HEADER + 8..NLMSG_HEADER + 12].copy_from_slice(&sequence.to_ne_bytes());
        let event = NLMSG_HEADER + CN_MSG_HEADER;
        m[event..event + 4].copy_from_slice(&what.to_ne_bytes());
        m[event + 4..event + 8].copy_from_slice(&cpu.to_ne_bytes());
        for word in data {
            m.extend_from_slice(&word.to_ne_bytes());
        }
        m
    }

    #[test]
    fn a_gap_in_a_cpus_numbers_is_a_loss() {
        let mut numbering = Numbering::default();
        assert!(numbering.follows(0, 41));
        assert!(numbering.follows(0, 42));
        assert!(numbering.follows(1, 7));
        assert!(numbering.follows(0, 43));
        // Event 44 of CPU 0 was dropped.
        assert!(!numbering.follows(0, 45));
        assert!(numbering.follows(0, 46));
        // The numbers wrap.
        assert!(numbering.follows(2, u32::MAX));
        assert!(numbering.follows(2, 0));
        numbering.clear();
        assert!(numbering.follows(1, 100));
    }

    #[test]
    fn forks_and_exits_of_processes_are_read_and_threads_left_out() {
        let fork = message(1, 7, PROC_EVENT_FORK, [10, 10, 11, 11]);
        assert_eq!(
            parse(&fork),
            Some(Message {
                cpu: 1,
                sequence: 7,
                says: Says::Event(Event::Forked(11))
            })
        );
        let says = |m: &[u8]| parse(m).map(|m| m.says);
        // A new thread (tid 12 of process 10).
        let thread = message(0, 3, PROC_EVENT_FORK, [10, 10, 12, 10]);
        assert_eq!(says(&thread), Some(Says::Nothing));
        let exit = message(0, 4, PROC_EVENT_EXIT, [11, 11, 0, 17]);
        assert_eq!(says(&exit), Some(Says::Event(Event::Exited(11))));
        let thread_exit = message(0, 5, PROC_EVENT_EXIT, [12, 10, 0, 0]);
        assert_eq!(says(&thread_exit), Some(Says::Nothing));
        // Exec (2): no fd table gains a descriptor by it.
        let exec = message(0, 6, 2, [11, 11, 0, 0]);
        assert_eq!(says(&exec), Some(Says::Nothing));
        assert_eq!(says(&message(0, 8, 0, [0, 0, 0, 0])), Some(Says::Answer(0)));
        // Another connector's message, and a short one.
        let mut other = fork.clone();
        other[NLMSG_HEADER..NLMSG_HEADER + 4].copy_from_slice(&2u32.to_ne_bytes());
        assert_eq!(parse(&other), None);
        assert_eq!(parse(&fork[..EVENT_DATA + 8]), None);
    }
}
