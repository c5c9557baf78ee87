//! The end-to-end tests of the built `distlock` binary, one module per area, in one test
//! binary (one link instead of one per area).

mod support;

mod cli;
mod doctor;
mod exec_group;
mod exec_primitives;
mod exec_shared;
mod guide_commands;
mod leader;
mod schema;
