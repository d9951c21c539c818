//! Unit tests of `glob`.

use super::*;

fn p(pattern: &str) -> Glob {
    Glob::new(pattern, '/').unwrap()
}

#[test]
fn star_stays_in_segment() {
    assert!(p("/v1/*").is_match("/v1/a"));
    assert!(!p("/v1/*").is_match("/v1/a/b"));
    assert!(p("/v1/*").is_match("/v1/"));
    assert!(p("/usr/bin/py*").is_match("/usr/bin/python3"));
    assert!(!p("/usr/bin/py*").is_match("/usr/bin/py/x"));
    assert!(p("/a/*/c").is_match("/a/b/c"));
    assert!(!p("/a/*/c").is_match("/a/b/x/c"));
}

#[test]
fn double_star_forms() {
    // prefix/**: descendants, not the prefix itself
    assert!(p("/x/**").is_match("/x/a"));
    assert!(p("/x/**").is_match("/x/a/b"));
    assert!(p("/x/**").is_match("/x/"));
    assert!(!p("/x/**").is_match("/x"));
    // **/suffix: zero or more leading segments
    assert!(p("**/foo").is_match("foo"));
    assert!(p("**/foo").is_match("/foo"));
    assert!(p("**/foo").is_match("a/b/foo"));
    assert!(!p("**/foo").is_match("afoo"));
    // /**/ middle: zero or more segments
    assert!(p("/a/**/z").is_match("/a/z"));
    assert!(p("/a/**/z").is_match("/a/b/c/z"));
    assert!(!p("/a/**/z").is_match("/az"));
    // ** alone: everything
    assert!(p("**").is_match(""));
    assert!(p("**").is_match("/a/b"));
    // ** next to other characters degrades to *
    assert!(p("/a**").is_match("/abc"));
    assert!(!p("/a**").is_match("/ab/c"));
    assert!(p("/**").is_match("/a/b/c"));
}

#[test]
fn covering_prefix() {
    let g = Glob::new_covering_prefix("/x/**", '/').unwrap();
    assert!(g.is_match("/x"));
    assert!(g.is_match("/x/y"));
    assert!(!g.is_match("/xy"));
    let all = Glob::new_covering_prefix("/**", '/').unwrap();
    assert!(all.is_match("/"));
}

#[test]
fn classes_alternation_escape() {
    assert!(p("/usr/bin/{curl,wget}").is_match("/usr/bin/wget"));
    assert!(!p("/usr/bin/{curl,wget}").is_match("/usr/bin/git"));
    assert!(p("/usr/bin/?it").is_match("/usr/bin/git"));
    assert!(p("/v[0-9]/x").is_match("/v2/x"));
    assert!(!p("/v[!0-9]/x").is_match("/v2/x"));
    assert!(!p("/a[/]b").is_match("/a/b"));
    assert!(p("/a\\*b").is_match("/a*b"));
    assert!(!p("/a\\*b").is_match("/axb"));
    assert!(matches!(
        Glob::new("/a[b", '/'),
        Err(GlobError::UnclosedClass(_))
    ));
    assert!(matches!(
        Glob::new("/a{b", '/'),
        Err(GlobError::UnclosedAlternation(_))
    ));
    assert!(matches!(
        Glob::new("/a{b,{c}}", '/'),
        Err(GlobError::NestedAlternation(_))
    ));
}

#[test]
fn query_values_use_dot_delimiter() {
    let g = Glob::new("v1.*", '.').unwrap();
    assert!(g.is_match("v1.2"));
    assert!(!Glob::new("v*", '.').unwrap().is_match("v1.2"));
    assert!(Glob::new("a*", '.').unwrap().is_match("a/b/c"));
}

#[test]
fn specificity_counts_non_star() {
    assert_eq!(p("/v1/*").specificity(), 4);
    assert_eq!(p("/**").specificity(), 1);
}

#[test]
fn glob_intersection() {
    assert!(p("/v1/*").intersects(&p("/v1/users")));
    assert!(!p("/v1/*").intersects(&p("/v2/*")));
    assert!(p("/v1/**").intersects(&p("/*/x")));
    assert!(!p("/v1/*").intersects(&p("/v1/a/b")));
    assert!(p("/a*").intersects(&p("/*b")));
    assert!(!p("/a[0-9]").intersects(&p("/a[a-z]")));
    assert!(p("**").intersects(&p("/anything")));
}

fn h(pattern: &str) -> HostPattern {
    HostPattern::new(pattern).unwrap()
}

#[test]
fn host_wildcards() {
    assert!(h("*.example.com").is_match("api.example.com"));
    assert!(!h("*.example.com").is_match("example.com"));
    assert!(!h("*.example.com").is_match("a.b.example.com"));
    assert!(h("**.example.com").is_match("a.b.example.com"));
    assert!(h("**.example.com").is_match("a.example.com"));
    assert!(!h("**.example.com").is_match("example.com"));
    assert!(h("*-aiplatform.googleapis.com").is_match("us-central1-aiplatform.googleapis.com"));
    assert!(!h("*-aiplatform.googleapis.com").is_match("us-central1.aiplatform.googleapis.com"));
    assert!(h("*.s3.*.amazonaws.com").is_match("b.s3.us-east-1.amazonaws.com"));
    assert!(!h("*.s3.*.amazonaws.com").is_match("s3.us-east-1.amazonaws.com"));
    assert!(!h("*.s3.*.amazonaws.com").is_match("b.s3.dualstack.us-east-1.amazonaws.com"));
    assert!(h("API.Example.COM").is_match("api.example.com"));
    assert!(h("api.example.*").is_match("api.example.org"));
}

#[test]
fn host_literals_without_star() {
    assert_eq!(h("{a,b}.x.com"), HostPattern::Exact("{a,b}.x.com".into()));
    assert!(!h("?.x.com").is_match("a.x.com"));
    assert!(h("?.x.com").is_match("?.x.com"));
}

#[test]
fn host_refusals() {
    for bad in ["*", "**", "*.com", "**.com"] {
        assert!(
            matches!(HostPattern::new(bad), Err(HostPatternError::TooBroad(_))),
            "{bad}"
        );
    }
    assert!(matches!(
        HostPattern::new("a.**.example.com"),
        Err(HostPatternError::MisplacedDoubleStar(_))
    ));
    assert!(matches!(
        HostPattern::new("x.api-*.example.com"),
        Err(HostPatternError::PartialLabelWildcard(_))
    ));
    assert!(HostPattern::new("api-*.example.com").is_ok());
    assert!(HostPattern::new("*.*.com").is_ok());
}

#[test]
fn host_intersection() {
    assert!(h("*.example.com").intersects(&h("api.example.com")));
    assert!(!h("*.example.com").intersects(&h("example.com")));
    assert!(h("**.example.com").intersects(&h("*.*.example.com")));
    assert!(!h("*.example.com").intersects(&h("*.*.example.com")));
    assert!(!h("*.example.com").intersects(&h("*.example.org")));
    assert!(h("**.example.com").intersects(&h("**.b.example.com")));
    assert!(HostPattern::Any.intersects(&h("x.y.z")));
    assert_eq!(
        h("*.api.example.com").literal_suffix().as_deref(),
        Some("api.example.com")
    );
    assert_eq!(h("api.example.*").literal_suffix(), None);
}
