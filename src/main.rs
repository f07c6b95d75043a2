//! Thin entry point: parse, dispatch, map errors to exit codes.

use clap::Parser;
use opledger::cli::{dispatch, Cli};

fn main() {
    let cli = Cli::parse();
    let code = match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
    };
    std::process::exit(code as i32);
}
