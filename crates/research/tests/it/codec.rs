//! placeholder-free module filled below.
