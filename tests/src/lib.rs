//! sluice-e2e: fixtures shared by the end-to-end tests (locating the built binaries, running
//! them, temporary policy files). The tests themselves live in `tests/tests/`.
#![forbid(unsafe_code)]
