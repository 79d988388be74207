//! Workers: what runs an atom's work. The command runner spawns `bash -c` in
//! its own process group, with output capture and cancellation.

pub mod command;
