//! The deployment examples in `configs/` (Kubernetes and Docker Compose), parsed with the
//! YAML parser sluice uses for policies and checked for the fields that matter: the fence's
//! capabilities and flags, sluice's fixed non-root uid and its only capability, the shared PID
//! namespace, the probes on the metrics listener, secrets only in sluice's container, flags
//! that `sluice run --help` and `sluice netfence apply --help` know, and a policy that
//! `sluice policy check` accepts. Nothing here runs a cluster.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use sluice::policy::yaml::{self, Kind, Node};
use sluice_e2e::proxy::TempDir;
use sluice_e2e::{sluice_bin, workspace_dir};

/// Flags the examples pass that this build does not have yet, each with the work that adds
/// it. Every other flag must be in `--help`; empty this list as they land.
const PENDING: &[(&str, &str)] = &[];

const SLUICE_UID: i128 = 1337;

fn configs() -> PathBuf {
    workspace_dir().join("configs")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn get<'a>(node: &'a Node<'a>, key: &str) -> Option<&'a Node<'a>> {
    match &node.kind {
        Kind::Map(pairs) => pairs
            .iter()
            .find(|(k, _)| matches!(&k.kind, Kind::Scalar(s, _) if s == key))
            .map(|(_, v)| v),
        _ => None,
    }
}

fn at<'a>(node: &'a Node<'a>, path: &[&str]) -> &'a Node<'a> {
    path.iter().fold(node, |n, key| {
        get(n, key).unwrap_or_else(|| panic!("no `{}` (at {})", path.join("."), n.pos))
    })
}

fn text<'a>(node: &'a Node<'a>) -> &'a str {
    match &node.kind {
        Kind::Scalar(s, _) => s,
        _ => panic!("expected a scalar at {}", node.pos),
    }
}

fn int(node: &Node<'_>) -> i128 {
    yaml::parse_int(text(node)).unwrap_or_else(|| panic!("expected an integer at {}", node.pos))
}

fn items<'a>(node: &'a Node<'a>) -> &'a [Node<'a>] {
    match &node.kind {
        Kind::Seq(s) => s,
        _ => panic!("expected a list at {}", node.pos),
    }
}

fn strings(node: &Node<'_>) -> Vec<String> {
    items(node).iter().map(|n| text(n).to_string()).collect()
}

fn named<'a>(list: &'a Node<'a>, name: &str) -> &'a Node<'a> {
    items(list)
        .iter()
        .find(|c| get(c, "name").is_some_and(|n| text(n) == name))
        .unwrap_or_else(|| panic!("no container `{name}`"))
}

/// Every `--flag` a command's `--help` lists.
fn help_flags(args: &[&str]) -> BTreeSet<String> {
    let out = Command::new(sluice_bin()).args(args).output().unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(str::to_string)
        .collect()
}

/// Every flag in `args` is known to the command (or pending, with its reason).
fn assert_flags_exist(args: &[String], help: &[&str], what: &str) {
    let known = help_flags(help);
    for flag in args.iter().filter(|a| a.starts_with("--")) {
        let pending = PENDING.iter().any(|(f, _)| f == flag);
        assert!(
            known.contains(flag) || pending,
            "{what} passes {flag}, which `sluice {}` does not know",
            help.join(" ")
        );
    }
}

/// The value after `flag` in `args`, for every occurrence.
fn values(args: &[String], flag: &str) -> Vec<String> {
    args.windows(2)
        .filter(|w| w[0] == flag)
        .map(|w| w[1].clone())
        .collect()
}

fn port_of(addr: &str) -> String {
    addr.rsplit(':').next().unwrap().to_string()
}

/// The fence's command agrees with sluice's listeners and uid.
fn assert_fence_matches(fence: &[String], sluice: &[String], what: &str) {
    assert_eq!(&fence[..3], ["sluice", "netfence", "apply"], "{what}");
    assert_flags_exist(&fence[3..], &["netfence", "apply", "--help"], what);
    let t = values(fence, "--transparent-port");
    let d = values(fence, "--dns-port");
    assert_eq!(
        values(fence, "--proxy-uid"),
        [SLUICE_UID.to_string()],
        "{what}"
    );
    let listeners = values(sluice, "--transparent-listen");
    assert!(!listeners.is_empty(), "{what}: no --transparent-listen");
    assert!(
        listeners.iter().all(|l| [port_of(l)] == t[..]),
        "{what}: {listeners:?} vs {t:?}"
    );
    let dns = values(sluice, "--dns-listen");
    assert!(!dns.is_empty(), "{what}: no --dns-listen");
    assert!(
        dns.iter().all(|l| [port_of(l)] == d[..]),
        "{what}: {dns:?} vs {d:?}"
    );
    // Both loopback families: nftables redirects IPv4 to 127.0.0.1 and IPv6 to ::1.
    for list in [&listeners, &dns] {
        assert!(
            list.iter().any(|l| l.starts_with("127.0.0.1:")),
            "{what}: {list:?}"
        );
        assert!(
            list.iter().any(|l| l.starts_with("[::1]:")),
            "{what}: {list:?}"
        );
    }
}

#[test]
fn the_kubernetes_sidecar_has_the_fields_that_matter() {
    let text_of = read(&configs().join("kubernetes/deployment.yaml"));
    let doc = yaml::parse(&text_of).unwrap().unwrap();
    assert_eq!(text(at(&doc, &["kind"])), "Deployment");
    let pod = at(&doc, &["spec", "template", "spec"]);
    assert_eq!(text(at(pod, &["shareProcessNamespace"])), "true");
    assert_eq!(text(at(pod, &["automountServiceAccountToken"])), "false");

    let sluice = named(at(pod, &["containers"]), "sluice");
    let mut args = strings(at(sluice, &["command"]));
    args.extend(strings(at(sluice, &["args"])));
    assert_eq!(&args[..2], ["sluice", "run"]);
    assert_flags_exist(&args[2..], &["run", "--help"], "the sluice container");
    let sc = at(sluice, &["securityContext"]);
    assert_eq!(int(at(sc, &["runAsUser"])), SLUICE_UID);
    assert_eq!(text(at(sc, &["runAsNonRoot"])), "true");
    assert_eq!(text(at(sc, &["allowPrivilegeEscalation"])), "false");
    assert_eq!(text(at(sc, &["readOnlyRootFilesystem"])), "true");
    assert_eq!(strings(at(sc, &["capabilities", "drop"])), ["ALL"]);
    assert_eq!(strings(at(sc, &["capabilities", "add"])), ["SYS_PTRACE"]);
    let metrics = values(&args, "--metrics-listen");
    assert_eq!(metrics.len(), 1);
    for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
        assert_eq!(text(at(sluice, &[probe, "httpGet", "path"])), path);
        assert_eq!(
            int(at(sluice, &[probe, "httpGet", "port"])).to_string(),
            port_of(&metrics[0])
        );
    }

    let fence = &items(at(pod, &["initContainers"]))[0];
    let fsc = at(fence, &["securityContext"]);
    assert_eq!(strings(at(fsc, &["capabilities", "drop"])), ["ALL"]);
    assert_eq!(strings(at(fsc, &["capabilities", "add"])), ["NET_ADMIN"]);
    assert_eq!(text(at(fsc, &["allowPrivilegeEscalation"])), "false");
    assert_fence_matches(
        &strings(at(fence, &["command"])),
        &args,
        "the init container",
    );

    // The agent: another uid (the fence exempts sluice's), no capabilities, and only the
    // placeholder, never the Secret.
    let agent = named(at(pod, &["containers"]), "agent");
    let asc = at(agent, &["securityContext"]);
    assert_ne!(int(at(asc, &["runAsUser"])), SLUICE_UID);
    assert!(get(at(asc, &["capabilities"]), "add").is_none());
    assert!(
        !read_section(&text_of, "        - name: agent", "        - name: sluice")
            .contains("secretKeyRef"),
        "the agent's container must not read the Secret"
    );
    let env = at(agent, &["env"]);
    let token = named(env, "GITHUB_TOKEN");
    assert_eq!(
        text(at(token, &["value"])),
        "openshell:resolve:env:GITHUB_TOKEN"
    );
    let real = named(at(sluice, &["env"]), "GITHUB_TOKEN");
    assert_eq!(
        text(at(real, &["valueFrom", "secretKeyRef", "name"])),
        "sluice-secrets"
    );

    let secret_text = read(&configs().join("kubernetes/sluice-secret.yaml"));
    let secret = yaml::parse(&secret_text).unwrap().unwrap();
    assert_eq!(text(at(&secret, &["kind"])), "Secret");
    assert_eq!(text(at(&secret, &["metadata", "name"])), "sluice-secrets");
    assert!(get(at(&secret, &["stringData"]), "GITHUB_TOKEN").is_some());
}

/// The lines of `text` from `from` up to (not including) `to`.
fn read_section<'t>(text: &'t str, from: &str, to: &str) -> &'t str {
    let start = text.find(from).expect("section start");
    let end = text[start..].find(to).map_or(text.len(), |i| start + i);
    &text[start..end]
}

#[test]
fn the_configmap_policy_and_providers_pass_policy_check() {
    let text_of = read(&configs().join("kubernetes/sluice-config.yaml"));
    let doc = yaml::parse(&text_of).unwrap().unwrap();
    assert_eq!(text(at(&doc, &["kind"])), "ConfigMap");
    let dir = TempDir::new("configs");
    let policy = dir.write("policy.yaml", text(at(&doc, &["data", "policy.yaml"])));
    let providers = dir.write(
        "providers.yaml",
        text(at(&doc, &["data", "providers.yaml"])),
    );
    let out = Command::new(sluice_bin())
        .args(["policy", "check", "--providers"])
        .arg(&providers)
        .arg(&policy)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_compose_sidecar_has_the_fields_that_matter() {
    let text_of = read(&configs().join("compose/compose.yaml"));
    let doc = yaml::parse(&text_of).unwrap().unwrap();
    let services = at(&doc, &["services"]);
    let sluice = at(services, &["sluice"]);
    let args = strings(at(sluice, &["command"]));
    assert_eq!(&args[..2], ["sluice", "run"]);
    assert_flags_exist(&args[2..], &["run", "--help"], "the sluice service");
    assert_eq!(
        text(at(sluice, &["user"])),
        format!("{SLUICE_UID}:{SLUICE_UID}")
    );
    assert_eq!(strings(at(sluice, &["cap_drop"])), ["ALL"]);
    assert_eq!(strings(at(sluice, &["cap_add"])), ["SYS_PTRACE"]);

    let fence = at(services, &["fence"]);
    assert_eq!(text(at(fence, &["network_mode"])), "service:sluice");
    assert_eq!(strings(at(fence, &["cap_drop"])), ["ALL"]);
    assert_eq!(strings(at(fence, &["cap_add"])), ["NET_ADMIN"]);
    assert_fence_matches(
        &strings(at(fence, &["command"])),
        &args,
        "the fence service",
    );

    let agent = at(services, &["agent"]);
    assert_eq!(text(at(agent, &["network_mode"])), "service:sluice");
    assert_eq!(text(at(agent, &["pid"])), "service:sluice");
    assert_ne!(text(at(agent, &["user"])).split(':').next(), Some("1337"));
    assert!(get(agent, "cap_add").is_none());
    assert_eq!(
        text(at(agent, &["environment", "GITHUB_TOKEN"])),
        "openshell:resolve:env:GITHUB_TOKEN"
    );
    assert_eq!(
        text(at(agent, &["depends_on", "fence", "condition"])),
        "service_completed_successfully",
        "the agent starts only after the fence is up"
    );
}

/// The gateway example (`configs/kubernetes/gateway.yaml` with `configs/gateway/`): sluice's
/// flags exist, it runs as its fixed non-root uid with no capability at all (a gateway reads
/// no other process's /proc), its probes are on the metrics listener, every replica has the
/// one CA (no `sessionAffinity`), the pod's grace period outlasts the drain, a disruption
/// budget, an autoscaler and a ServiceMonitor are there, the metrics port is closed to
/// tenants, and the tenants file it names loads: started for real with the example's tenants
/// (the secrets file and password stood in for), sluice serves them.
#[test]
fn the_kubernetes_gateway_has_the_fields_that_matter_and_its_tenants_load() {
    let text_of = read(&configs().join("kubernetes/gateway.yaml"));
    let doc = yaml::parse(&text_of).unwrap().unwrap();
    assert_eq!(text(at(&doc, &["kind"])), "List");
    let list = items(at(&doc, &["items"]));
    let deployment = list
        .iter()
        .find(|i| text(at(i, &["kind"])) == "Deployment")
        .unwrap();
    let pod = at(deployment, &["spec", "template", "spec"]);
    assert_eq!(text(at(pod, &["automountServiceAccountToken"])), "false");
    let sluice = named(at(pod, &["containers"]), "sluice");
    let mut args = strings(at(sluice, &["command"]));
    args.extend(strings(at(sluice, &["args"])));
    assert_eq!(&args[..2], ["sluice", "run"]);
    assert_flags_exist(&args[2..], &["run", "--help"], "the gateway container");
    let sc = at(sluice, &["securityContext"]);
    assert_eq!(int(at(sc, &["runAsUser"])), SLUICE_UID);
    assert_eq!(text(at(sc, &["runAsNonRoot"])), "true");
    assert_eq!(text(at(sc, &["readOnlyRootFilesystem"])), "true");
    assert_eq!(strings(at(sc, &["capabilities", "drop"])), ["ALL"]);
    assert!(get(at(sc, &["capabilities"]), "add").is_none());
    let metrics = values(&args, "--metrics-listen");
    for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
        assert_eq!(text(at(sluice, &[probe, "httpGet", "path"])), path);
        assert_eq!(
            int(at(sluice, &[probe, "httpGet", "port"])).to_string(),
            port_of(&metrics[0])
        );
    }
    let kind = |k: &str| -> Vec<&Node<'_>> {
        list.iter()
            .filter(|i| text(at(i, &["kind"])) == k)
            .collect()
    };
    // One CA for the fleet: no replica is a client's own.
    for service in kind("Service") {
        assert!(get(at(service, &["spec"]), "sessionAffinity").is_none());
    }
    assert_eq!(values(&args, "--ca-cert"), ["/etc/sluice-ca/tls.crt"]);
    assert_eq!(values(&args, "--ca-key"), ["/etc/sluice-secrets/ca.key"]);
    // The grace period outlasts the drain and the preStop pause.
    let drain: u64 = values(&args, "--drain-timeout")[0]
        .trim_end_matches('s')
        .parse()
        .unwrap();
    let pause = int(at(sluice, &["lifecycle", "preStop", "sleep", "seconds"]));
    let grace = int(at(pod, &["terminationGracePeriodSeconds"]));
    assert!(
        grace > i128::from(drain) + pause,
        "{grace} vs {drain} + {pause}"
    );
    for k in [
        "PodDisruptionBudget",
        "HorizontalPodAutoscaler",
        "ServiceMonitor",
        "NetworkPolicy",
    ] {
        assert_eq!(kind(k).len(), 1, "{k}");
    }
    let ca_secret = kind("Secret")
        .into_iter()
        .find(|s| text(at(s, &["metadata", "name"])) == "sluice-gateway-ca")
        .expect("the CA Secret");
    assert_eq!(text(at(ca_secret, &["type"])), "kubernetes.io/tls");
    // The metrics port is not open to tenants: only the proxy port is open to all.
    let netpol = list
        .iter()
        .find(|i| text(at(i, &["kind"])) == "NetworkPolicy")
        .unwrap();
    let rules = items(at(netpol, &["spec", "ingress"]));
    let open_to_all: Vec<String> = rules
        .iter()
        .filter(|r| get(r, "from").is_none())
        .flat_map(|r| items(at(r, &["ports"])))
        .map(|p| int(at(p, &["port"])).to_string())
        .collect();
    assert_eq!(open_to_all, ["3128", "3129"]);
    assert_ne!(port_of(&metrics[0]), "3128");
    let tenants = values(&args, "--tenants");
    assert_eq!(tenants, ["/etc/sluice/tenants.yaml"]);

    // The tenants file as the ConfigMap carries it (configs/gateway/), with its absolute
    // secrets path and the password variable stood in for.
    let dir = TempDir::new("gateway-example");
    for entry in std::fs::read_dir(configs().join("gateway")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let body = read(&path);
        let secrets = dir.path().join("team-a.env");
        let body = body.replace("/etc/sluice-secrets/team-a.env", secrets.to_str().unwrap());
        dir.write(&name, &body);
    }
    let secrets = dir.write("team-a.env", "ANTHROPIC_API_KEY=sk-example-not-a-key\n");
    std::fs::set_permissions(
        &secrets,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let password = "a-long-random-example-password";
    let mut child = Command::new(sluice_bin())
        .args(["run", "--listen", "127.0.0.1:0", "--audit-log", "/dev/null"])
        .arg("--tenants")
        .arg(dir.path().join("tenants.yaml"))
        .env("SLUICE_TEAM_A_PROXY_PASSWORD", password)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut seen = String::new();
    for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)) {
        let line = line.unwrap();
        seen.push_str(&line);
        seen.push('\n');
        if line.contains("listening on") {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        seen.contains("gateway for 3 tenant(s): team-a, ci-runners, build-bots"),
        "{seen}"
    );
    assert!(!seen.contains(password), "{seen}");
}

/// Validates `files` against the Kubernetes API schemas of `version` (`tests/clients/
/// k8s_validate.py`: kubernetes-validate, strict, and the CRDs' own schemas): (passed,
/// output).
fn k8s_validate(version: &str, files: &[PathBuf]) -> (bool, String) {
    let script = workspace_dir().join("tests/clients/k8s_validate.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(version)
        .args(files)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !text.contains("No module named"),
        "the validator's packages are missing (./scripts/test installs tests/clients/requirements.txt and package.json): {text}"
    );
    (out.status.success(), text)
}

/// Every Kubernetes manifest in `configs/` is valid for the Kubernetes API (the oldest and
/// newest versions it is written for), not only parseable: each resource against the API's
/// schema, unknown fields included, and the ServiceMonitor against its CRD's schema. A
/// manifest with mistakes of each kind is refused (the validator is load-bearing).
#[test]
fn every_kubernetes_manifest_validates_against_the_api_schemas() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(configs().join("kubernetes"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 4, "{files:?}");
    for version in ["1.30", "1.35"] {
        let (ok, text) = k8s_validate(version, &files);
        assert!(ok, "Kubernetes {version}:\n{text}");
        assert!(text.contains("checked"), "{text}");
    }
    let dir = TempDir::new("k8s-invalid");
    let bad = dir.write(
        "bad.yaml",
        "apiVersion: v1\nkind: List\nitems:\n  - apiVersion: policy/v1\n    kind: PodDisruptionBudget\n    metadata: {name: a}\n    spec: {minAvailable: [2]}\n  - apiVersion: apps/v1\n    kind: Deployment\n    metadata: {name: b}\n    spec:\n      replica: 3\n      selector: {matchLabels: {app: b}}\n      template: {metadata: {labels: {app: b}}, spec: {containers: [{name: c, image: i}]}}\n  - apiVersion: monitoring.coreos.com/v1\n    kind: ServiceMonitor\n    metadata: {name: c}\n    spec: {endpoints: [{port: metrics}]}\n  - apiVersion: example.com/v1\n    kind: Widget\n    metadata: {name: d}\n",
    );
    let (ok, text) = k8s_validate("1.35", &[bad]);
    assert!(!ok, "{text}");
    for needle in [
        "PodDisruptionBudget/a: spec.minAvailable",
        "Deployment/b",
        "ServiceMonitor/c",
        "selector",
        "Widget/d: no schema",
    ] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
}
