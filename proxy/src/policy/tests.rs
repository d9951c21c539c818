//! Unit tests of the policy engine as a whole (load → decide).
