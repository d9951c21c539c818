//! The text attributes of an event that are made of other values (`type_name`, a request's
//! `message`, `metadata.uid`, the connection uid, `status_code`, `url_string`): written
//! straight into the line as they are formatted, so no string is built and freed per event.

use std::fmt::{self, Display, Formatter};

use serde::{Serialize, Serializer};

use super::super::{Authority, HttpRequest};
use super::{outcome_verb, strip_query};

/// A value serialized as the JSON string of its `Display` form, without building it first.
pub(super) struct Shown<T>(pub(super) T);

impl<T: Display> Serialize for Shown<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

/// `type_name`: `<class>: <activity caption>`.
pub(super) struct TypeName {
    pub(super) class: &'static str,
    pub(super) caption: &'static str,
}

impl Display for TypeName {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.class, self.caption)
    }
}

/// `message`: a sentence made for the event, or a request's, written as it goes.
pub(super) enum Message<'a> {
    Text(String),
    Request(&'a HttpRequest),
}

impl Display for Message<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Message::Text(text) => f.write_str(text),
            Message::Request(e) => write!(
                f,
                "HTTP {} {} {}{}",
                outcome_verb(e.outcome),
                e.method,
                e.dst.authority,
                strip_query(&e.path)
            ),
        }
    }
}

/// `metadata.uid`: made for the event, or a request's (`<instance>:<connection>:http:<ns>`).
pub(super) enum Uid<'a> {
    Text(String),
    Request {
        instance: &'a str,
        id: u64,
        nanos: u128,
    },
}

impl Display for Uid<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Uid::Text(text) => f.write_str(text),
            Uid::Request {
                instance,
                id,
                nanos,
            } => write!(f, "{instance}:{id}:http:{nanos}"),
        }
    }
}

/// The id shared by every event of one connection: `<instance>:<connection>`.
pub(super) struct ConnectionUid<'a> {
    pub(super) instance: &'a str,
    pub(super) id: u64,
}

impl Display for ConnectionUid<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.instance, self.id)
    }
}

/// `scheme://host[:port]path`: the port left out when it is the scheme's default, an IPv6
/// literal in brackets, the path without its query or fragment.
pub(super) struct UrlString<'a> {
    pub(super) scheme: &'a str,
    pub(super) authority: &'a Authority,
    pub(super) path: &'a str,
}

impl Display for UrlString<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let UrlString {
            scheme,
            authority,
            path,
        } = *self;
        let path = strip_query(path);
        match scheme {
            "http" => write!(f, "{scheme}://{}{path}", authority.to_uri_authority(80)),
            "https" => write!(f, "{scheme}://{}{path}", authority.to_uri_authority(443)),
            _ => write!(f, "{scheme}://{authority}{path}"),
        }
    }
}
