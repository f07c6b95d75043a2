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
    // An empty variable means "not set" (`OPLEDGER_THREADS= opledger run …`), as the
    // variables read by `settings` treat it; clap would parse the empty value as a flag's.
    for var in opledger::cli::ENV_DEFAULTS {
        if std::env::var_os(var).is_some_and(|v| v.to_string_lossy().trim().is_empty()) {
            // SAFETY: no other thread has started; nothing reads the environment concurrently.
            unsafe { std::env::remove_var(var) };
        }
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
    // A stopped run ends its children and removes its folders (`stop`).
    opledger::stop::on_signals();
    let code = match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
    };
    std::process::exit(code.status(bisect));
}
