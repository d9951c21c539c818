//! An offline validator of OCSF 1.8.0 events, for the audit lines sluice writes. It reads the
//! schema copy in `fixtures/ocsf-schema/1.8.0/` (resolved class and object definitions from
//! the OCSF schema server) and checks, recursively:
//!
//! - the class (`class_uid`) is one the copy has, and `metadata.version` is 1.8.0;
//! - every required attribute is present, in the event and in every object the copy defines;
//! - no attribute is unknown, and none is deprecated;
//! - attributes that belong to profiles (`profiles: [...]` in the schema) count only when one
//!   of those profiles is declared in `metadata.profiles`; otherwise they are unknown (a
//!   required one is then not required). Declared profiles must be profiles of the class;
//! - types: `integer_t` (32-bit), `long_t` and `timestamp_t` (64-bit integers, ms), `port_t`
//!   (0..=65535), `float_t`, `boolean_t`, `ip_t` (a parseable address), the string types,
//!   `object_t` (an object), `is_array` (an array of the type); `null` is never a value;
//! - enumerations: a value must be one the schema lists (integer `*_id`s and string enums);
//! - siblings: `<x>_id` and its caption attribute agree (any caption for Other);
//! - `type_uid` = `class_uid` * 100 + `activity_id`;
//! - `at_least_one` constraints of classes and objects.
//!
//! Objects the copy does not have (`network_connection_info`, `network_traffic`, `user`, ...)
//! and the free-form `object` type (`unmapped`) are accepted in any shape, as long as they are
//! JSON objects.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::path::Path;
use std::sync::OnceLock;

use serde_json::{Map, Value};

/// The schema version of the copy, and of every event it accepts.
pub const VERSION: &str = "1.8.0";

/// Checks `event` against the schema copy; every problem found, as `path: what`.
pub fn validate(event: &Value) -> Result<(), Vec<String>> {
    let schema = match schema() {
        Ok(schema) => schema,
        Err(e) => return Err(vec![e.clone()]),
    };
    let mut v = Validator {
        schema,
        profiles: BTreeSet::new(),
        errors: Vec::new(),
    };
    v.event(event);
    if v.errors.is_empty() {
        Ok(())
    } else {
        Err(v.errors)
    }
}

/// Parses one JSON line and validates it; the parsed event on success.
pub fn validate_line(line: &str) -> Result<Value, Vec<String>> {
    let event: Value =
        serde_json::from_str(line).map_err(|e| vec![format!("not a JSON object: {e}")])?;
    validate(&event).map(|()| event)
}

struct Schema {
    /// Classes by `uid`.
    classes: HashMap<i64, Value>,
    /// Objects by `name`.
    objects: HashMap<String, Value>,
}

fn schema() -> &'static Result<Schema, String> {
    static SCHEMA: OnceLock<Result<Schema, String>> = OnceLock::new();
    SCHEMA.get_or_init(|| load(&crate::fixture_dir("ocsf-schema/1.8.0")))
}

fn load(dir: &Path) -> Result<Schema, String> {
    let mut classes = HashMap::new();
    for def in read_dir(&dir.join("classes"))? {
        let uid = def["uid"]
            .as_i64()
            .ok_or_else(|| format!("a class in {} has no uid", dir.display()))?;
        classes.insert(uid, def);
    }
    let mut objects = HashMap::new();
    for def in read_dir(&dir.join("objects"))? {
        // Error stubs (`{"error": ...}`) are not definitions.
        if let (Some(name), Some(_)) = (def["name"].as_str(), def.get("attributes")) {
            objects.insert(name.to_owned(), def);
        }
    }
    if classes.is_empty() {
        return Err(format!("no OCSF classes under {}", dir.display()));
    }
    Ok(Schema { classes, objects })
}

fn read_dir(dir: &Path) -> Result<Vec<Value>, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut defs = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
            .path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let def = serde_json::from_str(&text)
            .map_err(|e| format!("{} is not JSON: {e}", path.display()))?;
        defs.push(def);
    }
    Ok(defs)
}

struct Validator<'s> {
    schema: &'s Schema,
    /// `metadata.profiles`.
    profiles: BTreeSet<String>,
    errors: Vec<String>,
}

impl Validator<'_> {
    fn error(&mut self, path: &str, what: impl std::fmt::Display) {
        let path = if path.is_empty() { "(event)" } else { path };
        self.errors.push(format!("{path}: {what}"));
    }

    fn event(&mut self, event: &Value) {
        let Some(obj) = event.as_object() else {
            self.error("", "an event is a JSON object");
            return;
        };
        let Some(uid) = obj.get("class_uid").and_then(Value::as_i64) else {
            self.error("class_uid", "missing or not an integer");
            return;
        };
        let Some(class) = self.schema.classes.get(&uid) else {
            self.error("class_uid", format!("unknown class {uid}"));
            return;
        };

        let class_profiles: Vec<&str> = class["profiles"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if let Some(declared) = event
            .pointer("/metadata/profiles")
            .and_then(Value::as_array)
        {
            for p in declared {
                match p.as_str() {
                    Some(p) if class_profiles.contains(&p) => {
                        self.profiles.insert(p.to_owned());
                    }
                    Some(p) => self.error(
                        "metadata.profiles",
                        format!("`{p}` is not a profile of class {uid}"),
                    ),
                    None => {} // the type check below reports it
                }
            }
        }
        match event.pointer("/metadata/version") {
            Some(Value::String(v)) if v == VERSION => {}
            Some(other) => self.error(
                "metadata.version",
                format!("{other} is not the schema's version {VERSION}"),
            ),
            None => {} // required: reported by the walk
        }

        self.object("", obj, class);

        if let (Some(activity), Some(type_uid)) = (
            obj.get("activity_id").and_then(Value::as_i64),
            obj.get("type_uid").and_then(Value::as_i64),
        ) && type_uid != uid * 100 + activity
        {
            self.error(
                "type_uid",
                format!(
                    "{type_uid} is not class_uid * 100 + activity_id = {}",
                    uid * 100 + activity
                ),
            );
        }
    }

    /// Checks `obj` against a class or object definition `def`.
    fn object(&mut self, path: &str, obj: &Map<String, Value>, def: &Value) {
        let empty = Map::new();
        let attrs = def["attributes"].as_object().unwrap_or(&empty);
        let child = |name: &str| {
            if path.is_empty() {
                name.to_owned()
            } else {
                format!("{path}.{name}")
            }
        };

        for (name, attr) in attrs {
            if attr["requirement"] == "required" && self.active(attr) && !obj.contains_key(name) {
                self.error(&child(name), "required attribute missing");
            }
        }

        for (name, value) in obj {
            let Some(attr) = attrs.get(name) else {
                self.error(&child(name), "unknown attribute");
                continue;
            };
            if !self.active(attr) {
                self.error(
                    &child(name),
                    format!(
                        "unknown attribute: it belongs to profile(s) {}, not declared in \
                         metadata.profiles",
                        attr["profiles"]
                    ),
                );
                continue;
            }
            if attr.get("@deprecated").is_some() {
                self.error(&child(name), "deprecated attribute");
            }
            self.value(&child(name), value, attr);
            self.sibling(&child, obj, name, value, attr);
        }

        if let Some(constraints) = def["constraints"].as_object() {
            for (kind, names) in constraints {
                let names: Vec<&str> = names
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let present = names.iter().filter(|n| obj.contains_key(**n)).count();
                match kind.as_str() {
                    "at_least_one" if present == 0 => {
                        self.error(path, format!("needs at least one of {names:?}"));
                    }
                    "just_one" if present != 1 => {
                        self.error(path, format!("needs exactly one of {names:?}"));
                    }
                    "at_least_one" | "just_one" => {}
                    other => self.error(path, format!("unknown schema constraint `{other}`")),
                }
            }
        }
    }

    /// Whether an attribute counts: it belongs to no profile, or to a declared one.
    fn active(&self, attr: &Value) -> bool {
        match attr.get("profiles") {
            Some(Value::Array(list)) if !list.is_empty() => list
                .iter()
                .filter_map(Value::as_str)
                .any(|p| self.profiles.contains(p)),
            _ => true,
        }
    }

    fn value(&mut self, path: &str, value: &Value, attr: &Value) {
        if attr["is_array"] == true {
            match value.as_array() {
                Some(items) => {
                    for (i, item) in items.iter().enumerate() {
                        self.single(&format!("{path}[{i}]"), item, attr);
                    }
                }
                None => self.error(path, "expected an array"),
            }
        } else {
            self.single(path, value, attr);
        }
    }

    fn single(&mut self, path: &str, value: &Value, attr: &Value) {
        let ty = attr["type"].as_str().unwrap_or("");
        if value.is_null() {
            self.error(
                path,
                format!("null is not a {ty} (leave the attribute out)"),
            );
            return;
        }
        let ok = match ty {
            "integer_t" => value.as_i64().is_some_and(|n| i32::try_from(n).is_ok()),
            "long_t" | "timestamp_t" => value.as_i64().is_some(),
            "port_t" => value.as_u64().is_some_and(|n| n <= 65_535),
            "float_t" => value.is_number(),
            "boolean_t" => value.is_boolean(),
            "ip_t" => value.as_str().is_some_and(|s| s.parse::<IpAddr>().is_ok()),
            "string_t" | "datetime_t" | "hostname_t" | "url_t" | "mac_t" | "uuid_t"
            | "subnet_t" | "process_name_t" | "file_path_t" | "file_name_t" | "file_hash_t"
            | "email_t" | "username_t" | "resource_uid_t" | "reg_key_path_t" => value.is_string(),
            "json_t" => true,
            "object_t" => match value.as_object() {
                Some(obj) => {
                    let object_type = attr["object_type"].as_str().unwrap_or("object");
                    if let Some(def) = self.schema.objects.get(object_type) {
                        self.object(path, obj, def);
                    }
                    true
                }
                None => false,
            },
            other => {
                self.error(path, format!("unknown schema type `{other}`"));
                return;
            }
        };
        if !ok {
            self.error(path, format!("{value} is not a valid {ty}"));
            return;
        }
        if let Some(values) = attr["enum"].as_object() {
            let key = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            if !values.contains_key(&key) {
                let mut allowed: Vec<&String> = values.keys().collect();
                allowed.sort();
                self.error(
                    path,
                    format!("{value} is not in the enumeration {allowed:?}"),
                );
            }
        }
    }

    /// `<x>_id` with a `sibling` caption attribute: the caption must be the enum's, unless
    /// the id means Other (then the source's own label is expected).
    fn sibling(
        &mut self,
        child: &dyn Fn(&str) -> String,
        obj: &Map<String, Value>,
        name: &str,
        value: &Value,
        attr: &Value,
    ) {
        let (Some(sibling), Some(values)) = (attr["sibling"].as_str(), attr["enum"].as_object())
        else {
            return;
        };
        let Some(label) = obj.get(sibling) else {
            return;
        };
        let key = match value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let Some(caption) = values.get(&key).and_then(|e| e["caption"].as_str()) else {
            return; // the enum check reports it
        };
        if caption == "Other" {
            if label.as_str().is_none_or(str::is_empty) {
                self.error(
                    &child(sibling),
                    format!("{name} is Other: expected the source's own label"),
                );
            }
        } else if label.as_str() != Some(caption) {
            self.error(
                &child(sibling),
                format!("{label} does not match {name} {value} (\"{caption}\")"),
            );
        }
    }
}

/// An event's `class_uid` (0 when absent).
pub fn class(e: &Value) -> u64 {
    e["class_uid"].as_u64().unwrap_or(0)
}

/// A Network Activity open.
pub fn is_open(e: &Value) -> bool {
    class(e) == 4001 && e["activity_id"] == 1
}

/// A Network Activity close.
pub fn is_close(e: &Value) -> bool {
    class(e) == 4001 && e["activity_id"] == 2
}

/// An event's `action_id`: 1 allowed, 2 denied (0 when absent).
pub fn action(e: &Value) -> u64 {
    e["action_id"].as_u64().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A small valid Network Activity event, written by hand from the schema.
    fn good() -> Value {
        json!({
            "class_uid": 4001,
            "class_name": "Network Activity",
            "category_uid": 4,
            "category_name": "Network Activity",
            "activity_id": 1,
            "activity_name": "Open",
            "type_uid": 400_101,
            "type_name": "Network Activity: Open",
            "time": 1_710_000_307_123_u64,
            "severity_id": 3,
            "severity": "Medium",
            "status_id": 2,
            "status": "Failure",
            "message": "CONNECT denied example.com:443",
            "metadata": {
                "version": "1.8.0",
                "product": { "name": "t", "vendor_name": "t", "version": "0" },
                "profiles": ["host", "security_control"],
            },
            "action_id": 2,
            "action": "Denied",
            "disposition_id": 2,
            "disposition": "Blocked",
            "firewall_rule": { "name": "-", "type": "l4" },
            "src_endpoint": { "ip": "127.0.0.1", "port": 50_000 },
            "dst_endpoint": { "hostname": "example.com", "port": 443 },
            "connection_info": { "direction_id": 2, "protocol_name": "tcp" },
            "actor": { "process": { "pid": 42, "name": "curl", "cmd_line": "curl x",
                "parent_process": { "pid": 1, "name": "init" } } },
            "device": { "hostname": "h", "type_id": 0, "type": "Unknown" },
            "unmapped": { "anything": [1, "two"] },
        })
    }

    /// `event` is rejected, with a message naming `path` and containing `what`.
    #[track_caller]
    fn rejects(event: &Value, path: &str, what: &str) {
        let errors = validate(event).expect_err("the event should be invalid");
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with(&format!("{path}: ")) && e.contains(what)),
            "no error `{path}: ...{what}...` in {errors:#?}"
        );
    }

    fn with(mut event: Value, pointer: &str, value: Value) -> Value {
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        let target = if parent.is_empty() {
            &mut event
        } else {
            event.pointer_mut(parent).unwrap()
        };
        target
            .as_object_mut()
            .unwrap()
            .insert(key.to_owned(), value);
        event
    }

    fn without(mut event: Value, pointer: &str) -> Value {
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        let target = if parent.is_empty() {
            &mut event
        } else {
            event.pointer_mut(parent).unwrap()
        };
        target.as_object_mut().unwrap().remove(key);
        event
    }

    #[test]
    fn a_good_event_passes() {
        assert_eq!(validate(&good()), Ok(()));
        let line = good().to_string();
        assert!(validate_line(&line).is_ok());
    }

    #[test]
    fn missing_required_attributes() {
        rejects(
            &without(good(), "/severity_id"),
            "severity_id",
            "required attribute missing",
        );
        rejects(&without(good(), "/time"), "time", "required");
        rejects(
            &without(good(), "/metadata/product"),
            "metadata.product",
            "required",
        );
        rejects(
            &without(good(), "/device/type_id"),
            "device.type_id",
            "required",
        );
        let http = json!({
            "class_uid": 4002, "category_uid": 4, "activity_id": 3, "type_uid": 400_203,
            "time": 1, "severity_id": 1,
            "metadata": { "version": "1.8.0", "product": { "name": "t" } },
            "http_response": { "status": "OK" },
        });
        rejects(&http, "http_response.code", "required");
    }

    #[test]
    fn wrong_types() {
        rejects(
            &with(good(), "/time", json!("now")),
            "time",
            "not a valid timestamp_t",
        );
        rejects(&with(good(), "/time", json!(1.5)), "time", "timestamp_t");
        rejects(
            &with(good(), "/activity_id", json!("1")),
            "activity_id",
            "integer_t",
        );
        rejects(
            &with(good(), "/dst_endpoint/port", json!(70_000)),
            "dst_endpoint.port",
            "port_t",
        );
        rejects(
            &with(good(), "/src_endpoint/ip", json!("[::1]")),
            "src_endpoint.ip",
            "ip_t",
        );
        rejects(
            &with(good(), "/actor/process/parent_process/pid", json!("1")),
            "actor.process.parent_process.pid",
            "integer_t",
        );
        rejects(
            &with(good(), "/metadata/profiles", json!("host")),
            "metadata.profiles",
            "expected an array",
        );
        rejects(&with(good(), "/message", Value::Null), "message", "null");
        rejects(&with(good(), "/actor", json!("curl")), "actor", "object_t");
    }

    #[test]
    fn objects_missing_from_the_copy_must_still_be_objects() {
        assert_eq!(
            validate(&with(good(), "/connection_info", json!({ "whatever": 1 }))),
            Ok(())
        );
        rejects(
            &with(good(), "/connection_info", json!("tcp")),
            "connection_info",
            "object_t",
        );
        rejects(
            &with(good(), "/unmapped", json!([1])),
            "unmapped",
            "object_t",
        );
    }

    #[test]
    fn unknown_attributes() {
        rejects(
            &with(good(), "/colour", json!(1)),
            "colour",
            "unknown attribute",
        );
        rejects(
            &with(good(), "/dst_endpoint/colour", json!(1)),
            "dst_endpoint.colour",
            "unknown attribute",
        );
        rejects(
            &with(good(), "/actor/process/parent_process/colour", json!(1)),
            "actor.process.parent_process.colour",
            "unknown attribute",
        );
        rejects(
            &with(good(), "/metadata/product/colour", json!(1)),
            "metadata.product.colour",
            "unknown attribute",
        );
    }

    #[test]
    fn profile_attributes_need_their_profile() {
        let no_security = with(good(), "/metadata/profiles", json!(["host"]));
        rejects(&no_security, "action_id", "security_control");
        rejects(&no_security, "disposition", "security_control");
        rejects(&no_security, "firewall_rule", "security_control");
        let no_host = with(good(), "/metadata/profiles", json!(["security_control"]));
        rejects(&no_host, "actor", "host");
        rejects(&no_host, "device", "host");
        rejects(
            &with(
                good(),
                "/metadata/profiles",
                json!(["host", "security_control", "nope"]),
            ),
            "metadata.profiles",
            "not a profile of class 4001",
        );
        // A required attribute of an undeclared profile (`cloud`, `osint`) is not required.
        assert_eq!(validate(&good()), Ok(()));
    }

    #[test]
    fn enumerations() {
        rejects(
            &with(good(), "/activity_id", json!(42)),
            "activity_id",
            "enumeration",
        );
        rejects(
            &with(good(), "/disposition_id", json!(999)),
            "disposition_id",
            "enumeration",
        );
        rejects(
            &with(good(), "/class_uid", json!(9999)),
            "class_uid",
            "unknown class",
        );
        let http = json!({
            "class_uid": 4002, "category_uid": 4, "activity_id": 99, "activity_name": "BREW",
            "type_uid": 400_299, "time": 1, "severity_id": 1,
            "metadata": { "version": "1.8.0", "product": { "name": "t" } },
            "http_request": { "http_method": "BREW" },
        });
        rejects(&http, "http_request.http_method", "enumeration");
    }

    #[test]
    fn siblings_agree() {
        rejects(
            &with(good(), "/activity_name", json!("Close")),
            "activity_name",
            "Open",
        );
        rejects(
            &with(good(), "/disposition", json!("Allowed")),
            "disposition",
            "Blocked",
        );
        rejects(
            &with(good(), "/class_name", json!("HTTP Activity")),
            "class_name",
            "does not match class_uid",
        );
        rejects(
            &with(good(), "/type_name", json!("Network Activity: Close")),
            "type_name",
            "does not match type_uid",
        );
        // Other: the source's own label is fine, an empty one is not.
        let other = with(
            with(
                with(good(), "/activity_id", json!(99)),
                "/type_uid",
                json!(400_199),
            ),
            "/activity_name",
            json!("Proxy"),
        );
        let other = with(other, "/type_name", json!("Network Activity: Other"));
        assert_eq!(validate(&other), Ok(()));
        rejects(
            &with(other, "/activity_name", json!("")),
            "activity_name",
            "Other",
        );
    }

    #[test]
    fn type_uid_arithmetic() {
        // 400102 is in the enum (Close), but not for activity 1.
        let wrong = with(
            with(good(), "/type_uid", json!(400_102)),
            "/type_name",
            json!("Network Activity: Close"),
        );
        rejects(&wrong, "type_uid", "class_uid * 100 + activity_id = 400101");
    }

    #[test]
    fn constraints_and_deprecation() {
        let no_endpoints = without(without(good(), "/src_endpoint"), "/dst_endpoint");
        rejects(&no_endpoints, "(event)", "at least one of");
        rejects(
            &with(good(), "/dst_endpoint", json!({ "port": 443 })),
            "dst_endpoint",
            "at least one of",
        );
        let http = json!({
            "class_uid": 4002, "category_uid": 4, "activity_id": 3, "type_uid": 400_203,
            "time": 1, "severity_id": 1,
            "metadata": { "version": "1.8.0", "product": { "name": "t" } },
            "http_response": { "code": 200 },
            "http_status": 200,
        });
        rejects(&http, "http_status", "deprecated");
    }

    #[test]
    fn version_must_be_1_8_0() {
        rejects(
            &with(good(), "/metadata/version", json!("1.7.0")),
            "metadata.version",
            "1.8.0",
        );
    }

    #[test]
    fn not_json_lines() {
        assert!(validate_line("{").is_err());
        assert!(validate(&json!([1])).is_err());
    }
}
