//! One module per subcommand.

pub mod algo;
pub mod bandwidth;
pub mod bench;
pub mod common;
pub mod launch;
pub mod sim;
pub mod topo;
