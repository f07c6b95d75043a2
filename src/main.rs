//! Thin entry point: parse, dispatch, map errors to exit codes.

use clap::Parser;
use opledger::cli::{dispatch, Cli};

fn main() {
    // Written to a closed pipe (`opledger ledger … | head`), end quietly as Unix tools do,
    // instead of panicking in println!.
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts; no
    // handler runs Rust code.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // A misspelt flag under `run --bisect` stops the bisection (as bad input does).
        Err(e) if e.use_stderr() && std::env::args().any(|a| a == "--bisect") => {
            let _ = e.print();
            std::process::exit(opledger::error::ExitCode::BadInput.status(true));
        }
        Err(e) => e.exit(),
    };
    let bisect = cli.bisect();
    let code = match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
    };
    std::process::exit(code.status(bisect));
}
