//! The parsers of what a hostile client sends never panic: request heads, request bodies
//! (chunked and fixed-length), CONNECT authorities, absolute-form targets, credential
//! placeholders with their percent and `Basic` decoding, ClientHello peeking, the
//! transparent listener's sniff of SNI or `Host`, a balancer's PROXY protocol header,
//! messages to the policy DNS, the tenants file, the audit lines `sluice audit` reads back,
//! policy files and provider profiles; and the streamed readers (request bodies' `_method`
//! readers and placeholder guard, WebSocket frames) give the same verdict however their
//! input is cut, at every split point. Each runs
//! the entry point in `sluice::fuzz` (the same the coverage-guided targets in `fuzz/` run) on
//! arbitrary bytes and on mutations of well-formed seeds, which reach far deeper than random
//! bytes do.
//!
//! `SLUICE_FUZZ_CASES` sets the cases per property (default 256: cheap enough for every test
//! run); `SLUICE_FUZZ_SEED` a fixed seed other than the default, so a run is repeatable.
//! Inputs that once crashed a parser are kept in `REGRESSIONS` and run every time.

use base64::Engine as _;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use sluice::fuzz;

fn config() -> Config {
    let cases = std::env::var("SLUICE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    let seed = std::env::var("SLUICE_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5_1u64 << 32 | 0xce);
    Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        max_shrink_iters: 4096,
        ..Config::default()
    }
}

/// [`config`] with a quarter of the cases: each case of the split properties reads its
/// input at every split point, hundreds of times.
fn config_cut() -> Config {
    let c = config();
    Config {
        cases: (c.cases / 4).max(1),
        ..c
    }
}

/// One edit of a seed: where, what, and with which byte.
#[derive(Clone, Copy, Debug)]
enum Edit {
    Set(usize, u8),
    Insert(usize, u8),
    Delete(usize),
    /// Repeat the 1..=16 bytes at the position.
    Repeat(usize, u8),
    /// Cut everything after the position.
    Truncate(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    // Bytes that matter to the grammars here, more often than the rest.
    let byte = prop_oneof![
        3 => any::<u8>(),
        2 => prop::sample::select(b"\r\n :;,%/?#[]@=&+.\t\0\x7f\xff0aF-_".to_vec()),
    ];
    prop_oneof![
        (any::<usize>(), byte.clone()).prop_map(|(at, b)| Edit::Set(at, b)),
        (any::<usize>(), byte).prop_map(|(at, b)| Edit::Insert(at, b)),
        any::<usize>().prop_map(Edit::Delete),
        (any::<usize>(), 1u8..=16).prop_map(|(at, n)| Edit::Repeat(at, n)),
        any::<usize>().prop_map(Edit::Truncate),
    ]
}

fn apply(seed: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut out = seed.to_vec();
    for e in edits {
        let len = out.len();
        let at = |i: usize| i % (len + 1);
        match *e {
            Edit::Set(i, b) if len > 0 => out[i % len] = b,
            Edit::Insert(i, b) => out.insert(at(i), b),
            Edit::Delete(i) if len > 0 => {
                out.remove(i % len);
            }
            Edit::Repeat(i, n) if len > 0 => {
                let start = i % len;
                let end = (start + usize::from(n)).min(len);
                let piece = out[start..end].to_vec();
                out.splice(end..end, piece);
            }
            Edit::Truncate(i) => out.truncate(at(i)),
            _ => {}
        }
    }
    out
}

/// A seed from `seeds`, mutated by up to 8 edits; or arbitrary bytes.
fn input(seeds: Vec<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        1 => prop::collection::vec(any::<u8>(), 0..512),
        4 => (prop::sample::select(seeds), prop::collection::vec(edit(), 0..8))
            .prop_map(|(seed, edits)| apply(&seed, &edits)),
    ]
}

/// The committed seeds of `target` (`fuzz/seeds/TARGET/`).
fn committed(target: &str) -> Vec<Vec<u8>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/seeds")
        .join(target);
    let mut out: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|f| std::fs::read(f.path()).ok())
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no seeds in {}", dir.display());
    out
}

/// The seeds of at most 512 bytes: the split properties read each at every split point.
fn short(seeds: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    seeds.into_iter().filter(|s| s.len() <= 512).collect()
}

fn seeds(list: &[&str]) -> Vec<Vec<u8>> {
    list.iter().map(|s| s.as_bytes().to_vec()).collect()
}

fn head_seeds() -> Vec<Vec<u8>> {
    seeds(&[
        "GET http://api.example.com/v1/x?y=1 HTTP/1.1\r\nHost: api.example.com\r\nUser-Agent: t\r\n\r\n",
        "POST /upload HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\nhello",
        "POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nX-HTTP-Method-Override: DELETE\r\n\r\n",
        "CONNECT api.example.com:443 HTTP/1.1\r\nHost: api.example.com:443\r\nProxy-Connection: keep-alive\r\n\r\n",
        "GET / HTTP/1.0\r\n\r\nGET /second HTTP/1.1\r\nHost: a\r\n\r\n",
        "\r\n\r\nGET /ws HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: x\r\n\r\n",
    ])
}

fn body_seeds() -> Vec<Vec<u8>> {
    seeds(&[
        "\x005;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: v\r\n\r\n",
        "\x01a\r\n0123456789\r\n0\r\n\r\nGET / HTTP/1.1\r\n",
        "\x00ffffffffffffff\r\nx\r\n",
        "\x03exactly this body",
        "\x02short",
        "\x00\x34\r\nopenshell:resolve:env:KEY and more text here...........\r\n0\r\n\r\n",
        "\x05{\"a\":[1,{\"_method\":\"x\"}],\"\\u005fmethod\" : \"delete\",\"b\":\"\\\"}\"}",
        "\x0b{\"_method\":\"GET\",\"_METHOD[]\":[\"PUT\"],\"z\":null}",
    ])
}

fn authority_seeds() -> Vec<Vec<u8>> {
    seeds(&[
        "api.example.com:443",
        "[::1]:8443",
        "[::ffff:169.254.169.254]:80",
        "127.0.0.1:65535",
        "xn--bcher-kva.example:443",
        "a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s.t.u.v.w.x.y.z:1",
    ])
}

fn target_seeds() -> Vec<Vec<u8>> {
    seeds(&[
        "http://api.example.com/v1/../x?q=%2F&_method=DELETE",
        "http://[::1]:8080/a%2Fb/./c?x=1;_method=put",
        "http://API.Example.COM:80",
        "http://user@h/x",
        "https://h/x",
        "http://h/%zz%00/..%2f..",
    ])
}

fn credential_seeds() -> Vec<Vec<u8>> {
    let basic = base64::engine::general_purpose::STANDARD.encode("user:openshell:resolve:env:KEY");
    let mut list = seeds(&[
        "\x20/v1/x?key=openshell:resolve:env:KEY&b=2Bearer openshell:resolve:env:KEY\nopenshell%3Aresolve%3Aenv%3AKEY",
        "\x10/p/openshell:resolve:env:OUT/xopenshell:resolve:env:UNKNOWN\ntoken=openshell:resolve:env:KEY",
        "\x00Bearer openshell:resolve:env:KEY1 openshell:resolve:env:KEY2\n${KEY}",
    ]);
    list.push(format!("\x00Basic {basic}\nBasic {basic}==").into_bytes());
    list
}

/// ClientHellos from a real TLS client (rustls), with and without SNI and ALPN.
fn hello_seeds() -> Vec<Vec<u8>> {
    use std::sync::Arc;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut out = Vec::new();
    for (name, alpn) in [
        (
            "api.example.com",
            vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        ),
        ("127.0.0.1", vec![]),
        ("xn--bcher-kva.example", vec![b"http/1.1".to_vec()]),
    ] {
        let Ok(builder) = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
        else {
            continue;
        };
        let mut config = builder
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        config.alpn_protocols = alpn;
        let Ok(server) = rustls::pki_types::ServerName::try_from(name.to_owned()) else {
            continue;
        };
        let Ok(mut conn) = rustls::ClientConnection::new(Arc::new(config), server) else {
            continue;
        };
        let mut hello = Vec::new();
        while conn.wants_write() {
            if conn.write_tls(&mut hello).is_err() {
                break;
            }
        }
        out.push(hello);
    }
    assert!(!out.is_empty(), "rustls made no ClientHello");
    out
}

/// A server frame (unmasked): FIN, opcode, payload.
fn ws_frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![if fin { 0x80 } else { 0 } | opcode];
    match payload.len() {
        n @ 0..=125 => f.push(n as u8),
        n => {
            f.push(126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
    }
    f.extend_from_slice(payload);
    f
}

/// What an upstream sends after a `101`, the secret in each place a frame can carry it
/// (a read-size byte first).
fn websocket_seeds() -> Vec<Vec<u8>> {
    let s = fuzz::WS_SECRET.as_bytes();
    let (a, b) = s.split_at(4);
    let text = [ws_frame(true, 1, &[b"token ", s].concat())].concat();
    let split = [
        ws_frame(false, 1, &[b"x", a].concat()),
        ws_frame(true, 9, b"ping"),
        ws_frame(true, 0, &[b, b"y"].concat()),
    ]
    .concat();
    let binary = ws_frame(true, 2, &[&[0u8, 1][..], s, &[0xff][..]].concat());
    let close = ws_frame(true, 8, &[&[3u8, 0xe8][..], &[b'r'; 110][..], s].concat());
    let long = ws_frame(true, 1, &[&[b'z'; 300][..], s].concat());
    [text, split, binary, close, long]
        .into_iter()
        .enumerate()
        .map(|(i, f)| [vec![i as u8 * 7], f].concat())
        .collect()
}

/// PROXY protocol headers as balancers send them: v1 over IPv4 and IPv6, `UNKNOWN`, and v2
/// PROXY (IPv4, IPv6 with a TLV) and LOCAL, each followed by the start of a request.
fn proxy_protocol_seeds() -> Vec<Vec<u8>> {
    let v2 = |command: u8, family: u8, body: &[u8]| {
        let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
        h.push(0x20 | command);
        h.push(family);
        h.extend_from_slice(&(body.len() as u16).to_be_bytes());
        h.extend_from_slice(body);
        h.extend_from_slice(b"CONNECT a:443 HTTP/1.1\r\n");
        h
    };
    let mut six = vec![0x20, 0x01, 0x0d, 0xb8];
    six.extend_from_slice(&[0; 12]);
    six.extend_from_slice(&[0xfd; 16]);
    six.extend_from_slice(&[0x1f, 0x90, 0x0c, 0x38]);
    six.extend_from_slice(&[0x04, 0x00, 0x02, b'i', b'd']);
    vec![
        b"PROXY TCP4 192.0.2.7 10.0.0.1 5555 3128\r\nGET / HTTP/1.1\r\n".to_vec(),
        b"PROXY TCP6 2001:db8::7 2001:db8::1 5555 3128\r\n\x16\x03\x01".to_vec(),
        b"PROXY UNKNOWN\r\n".to_vec(),
        v2(
            0x1,
            0x11,
            &[198, 51, 100, 9, 10, 0, 0, 1, 0x9c, 0x40, 0x0c, 0x38],
        ),
        v2(0x1, 0x21, &six),
        v2(0x0, 0x00, &[]),
    ]
}

/// The input of issue 31: a JSON `_method` whose value is not a string, then form fields,
/// one of them `%5Fmethod=delete` with control bytes. Read in pieces, the form and JSON
/// readers chained refused it for another reason than read whole.
const ISSUE_31: &[u8] = include_bytes!("../../fuzz/seeds/request_body/issue-31-split-verdict");

/// Inputs that once made a parser panic or misbehave: (target, input).
const REGRESSIONS: &[(&str, &[u8])] = &[("request_body", ISSUE_31)];

#[test]
fn regressions_stay_fixed() {
    for (target, input) in REGRESSIONS {
        let Some(run) = fuzz::target(target) else {
            panic!("unknown target {target}");
        };
        run(input);
    }
}

#[test]
fn the_issue_31_body_gets_one_verdict_however_it_is_cut() {
    // As the fuzz target reads it (the first byte picks the boundary and the pieces), and
    // the whole input as a body; every split point, pieces of 1 to 16 bytes, every reader.
    let (&pick, rest) = ISSUE_31.split_first().unwrap_or((&0, &[]));
    fuzz::request_body_splits(pick, rest);
    fuzz::request_body_splits(0, ISSUE_31);
    for pick in 0..=u8::MAX {
        fuzz::request_body(&[&[pick][..], rest].concat());
    }
}

#[test]
fn a_refusal_before_a_placeholder_answers_however_the_body_is_cut() {
    // The form field refused at its `&` comes before the marker: read whole or a byte at a
    // time, the refusal of the field is the answer (the guard once answered first when both
    // were in one chunk).
    fuzz::request_body_splits(0, b"_method=a%00b&x=openshell:resolve:env:KEY&y=1");
    fuzz::request_body_splits(0, b"{\"_method\":[1],\"k\":\"openshell:resolve:env:KEY\"}");
}

/// Every committed seed and corpus input (`fuzz/seeds/TARGET/`) replayed through its
/// target's entry point: none may panic or break a differential assertion. A directory
/// without a target fails, so a target added without its entry point is caught.
#[test]
fn committed_seeds_replay_clean() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds");
    let mut replayed = 0;
    let Ok(dirs) = std::fs::read_dir(&root) else {
        panic!("no seeds at {}", root.display());
    };
    for dir in dirs.flatten() {
        let name = dir.file_name().to_string_lossy().into_owned();
        let Some(run) = fuzz::target(&name) else {
            panic!("seeds for an unknown target: {name}");
        };
        let Ok(files) = std::fs::read_dir(dir.path()) else {
            continue;
        };
        let mut count = 0;
        for file in files.flatten() {
            let Ok(input) = std::fs::read(file.path()) else {
                continue;
            };
            let replay = std::panic::catch_unwind(|| run(&input));
            assert!(replay.is_ok(), "{name}: {} fails", file.path().display());
            count += 1;
        }
        assert!(count > 0, "{name} has no seeds");
        replayed += count;
    }
    for name in fuzz::TARGETS.iter().map(|(n, _)| n) {
        assert!(root.join(name).is_dir(), "{name} has no seed directory");
    }
    assert!(replayed > 0);
}

#[test]
fn seeds_exercise_the_parsers_they_feed() {
    // The seeds are well-formed: a seed that stopped parsing would leave its target fuzzing
    // only the error path.
    for seed in head_seeds() {
        let start = seed
            .iter()
            .position(|&b| b != b'\r' && b != b'\n')
            .unwrap_or(0);
        let end = start
            + seed[start..]
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .unwrap_or(0)
            + 4;
        assert!(
            sluice::http::head::parse(&seed[start..end]).is_ok(),
            "{}",
            String::from_utf8_lossy(&seed)
        );
    }
    for seed in authority_seeds() {
        let text = String::from_utf8(seed).unwrap_or_default();
        assert!(
            sluice::pipeline::authority::Authority::parse_connect(&text).is_ok(),
            "{text}"
        );
    }
    let parsed = target_seeds()
        .into_iter()
        .filter(|s| sluice::pipeline::target::parse_absolute(&String::from_utf8_lossy(s)).is_ok())
        .count();
    assert!(parsed >= 3, "only {parsed} target seeds parse");
    for hello in hello_seeds() {
        assert!(hello.first() == Some(&0x16), "not a TLS handshake record");
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn http_heads(data in input(head_seeds())) {
        fuzz::http_head(&data);
    }

    #[test]
    fn request_bodies(data in input(body_seeds())) {
        fuzz::request_body(&data);
    }


    #[test]
    fn connect_authorities(data in input(authority_seeds())) {
        fuzz::connect_authority(&data);
    }

    #[test]
    fn proxy_protocol_headers(data in input(proxy_protocol_seeds())) {
        fuzz::proxy_protocol(&data);
    }

    #[test]
    fn absolute_targets(data in input(target_seeds())) {
        fuzz::absolute_target(&data);
    }

    #[test]
    fn credential_rewrites(data in input(credential_seeds())) {
        fuzz::credential_rewrite(&data);
    }

    #[test]
    fn client_hellos(data in input(hello_seeds())) {
        fuzz::client_hello(&data);
    }

    #[test]
    fn transparent_sniffs(data in input([hello_seeds(), head_seeds()].concat())) {
        fuzz::transparent_sniff(&data);
    }

    #[test]
    fn websocket_frames(data in input(websocket_seeds())) {
        fuzz::websocket_frames(&data);
    }

    #[test]
    fn dns_queries(data in input(committed("dns_query"))) {
        fuzz::dns_query(&data);
    }

    #[test]
    fn tenants_files(data in input(committed("tenants_file"))) {
        fuzz::tenants_file(&data);
    }

    #[test]
    fn audit_lines(data in input(committed("audit_lines"))) {
        fuzz::audit_lines(&data);
    }

    #[test]
    fn policy_files(data in input(committed("policy_yaml"))) {
        fuzz::policy_yaml(&data);
    }

    #[test]
    fn provider_profiles(data in input(committed("provider_profile"))) {
        fuzz::provider_profile(&data);
    }

    #[test]
    fn rpc_bodies(data in input(committed("rpc_body"))) {
        fuzz::rpc_body(&data);
    }

    #[test]
    fn graphql_bodies(data in input(committed("graphql_body"))) {
        fuzz::graphql_body(&data);
    }

    #[test]
    fn sigv4_requests(data in input(committed("sigv4_request"))) {
        fuzz::sigv4_request(&data);
    }

    #[test]
    fn websocket_frames_cut_anywhere(data in input(websocket_seeds())) {
        fuzz::websocket_frames_splits(data.get(1..).unwrap_or_default());
    }
}

proptest! {
    #![proptest_config(config_cut())]

    #[test]
    fn request_bodies_cut_anywhere(data in input([body_seeds(), short(committed("request_body"))].concat())) {
        let (&pick, rest) = data.split_first().unwrap_or((&0, &[]));
        fuzz::request_body_splits(pick, rest);
    }

}
