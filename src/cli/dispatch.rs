//! A parsed command handed to its file in `commands/`, its flags first checked into that
//! command's options (`flags`).

use super::{flags, Cli, Command};
use crate::commands;
use crate::error::{ExitCode, Result};

/// Runs the parsed command; errors become exit codes in `main` (`Error::exit_code`, the one
/// place that maps them).
pub fn dispatch(cli: Cli) -> Result<ExitCode> {
    // Every `OPLEDGER_*` variable is read here, once: a bad one stops any command at once.
    let settings = crate::settings::Settings::from_env()?;
    crate::device::simd::install_cap(settings.simd);
    match cli.command {
        Command::Run(a) => {
            let wraps = commands::run::Wraps {
                ncu: a.ncu,
                bisect: a.bisect,
                rerecord_base: a.rerecord_base,
            };
            commands::run::run(&flags::run_options(a, settings)?, wraps)
        }
        Command::ProfilePass {
            run_dir,
            paths,
            seed,
        } => {
            commands::counters::profile_pass(&run_dir, &paths, seed)?;
            Ok(ExitCode::Pass)
        }
        Command::ProfileCounts { file, name, seed } => {
            crate::measure::counts::nsight::profile_counts(&file, &name, seed)
        }
        Command::Calibrate {
            run,
            runs,
            keep_history,
        } => commands::calibrate::calibrate(
            &flags::calibrate_options(run, runs, settings)?,
            runs,
            keep_history,
        ),
        Command::Counts {
            paths,
            cache_model,
            seed,
            format,
        } => commands::counts::counts(&flags::counts_options(
            paths,
            cache_model.as_deref(),
            seed,
            &format,
            settings,
        )?),
        Command::CountSide {
            file,
            name,
            sides,
            seed,
            ll_bytes,
        } => crate::measure::counts::valgrind::count_sides(
            &file,
            &name,
            &match sides.as_str() {
                "before" => vec![crate::backend::pair::Side::Before],
                "after" => vec![crate::backend::pair::Side::After],
                _ => vec![
                    crate::backend::pair::Side::Before,
                    crate::backend::pair::Side::After,
                ],
            },
            seed,
            ll_bytes,
        ),
        Command::Check { paths, backend } => commands::check::check(&paths, backend),
        Command::Ledger {
            paths,
            tiling,
            l2_mib,
        } => commands::ledger::ledger(&paths, tiling, l2_mib),
        Command::Roofline(a) => commands::roofline::roofline(&commands::roofline::Inputs {
            peak_tflops: a.peak_tflops,
            bw_gbps: a.bw_gbps,
            device: a.device.as_deref(),
            flops: a.flops,
            bytes: a.bytes,
        }),
        Command::CudaCompile { arch, out } => {
            let all_compiled = crate::backend::cuda::nvrtc::compile_all(arch, out.as_deref())?;
            Ok(if all_compiled {
                ExitCode::Pass
            } else {
                ExitCode::GateFailed
            })
        }
        Command::Schema { which, out } => commands::schema::schema(which, out.as_deref()),
        Command::WorkerTest {
            spec,
            timeout_secs,
            command,
        } => commands::worker_test::worker_test(&spec, &command, timeout_secs),
        archived => dispatch_archived(archived, settings),
    }
}

/// The commands that read archives or the history store.
fn dispatch_archived(command: Command, settings: crate::settings::Settings) -> Result<ExitCode> {
    match command {
        Command::Compare {
            runs,
            base,
            store,
            markdown,
            fail_on_inconclusive,
            baselines,
            link_base,
        } => {
            let url = store.url(&settings)?;
            let opts = commands::compare::CompareOptions {
                markdown,
                baselines,
                fail_on_inconclusive,
                link_base,
                store: Some(url.clone()),
            };
            commands::compare::compare(flags::compare_runs(&runs, base.as_deref())?, &url, &opts)
        }
        Command::Accept { run_dir, baselines } => commands::accept::accept(&run_dir, &baselines),
        Command::Merge {
            run_dirs,
            out,
            allow_partial,
            fail_on_inconclusive,
            store,
            no_store,
            branch,
        } => {
            let url = (!no_store).then(|| store.url(&settings)).transpose()?;
            let branch = url
                .as_ref()
                .and_then(|_| crate::provenance::git_branch(branch.as_deref()));
            commands::merge::merge_and_record(
                &run_dirs,
                &out,
                allow_partial,
                fail_on_inconclusive,
                url.as_ref().map(|u| (u, branch.as_deref())),
            )
        }
        Command::Counters { run_dir, ncu_csv } => {
            commands::counters::import_command(&run_dir, &ncu_csv)
        }
        Command::Verify { run_dir } => commands::verify::verify(&run_dir),
        Command::Site {
            out,
            store,
            only,
            last,
            commit_url,
            cases,
        } => commands::site::site(&commands::site::Options {
            store: store.url(&settings)?,
            query: crate::store::Query {
                specs: cases,
                device: only.device,
                branch: only.branch,
                last: Some(last),
            },
            out,
            commit_url,
        }),
        Command::Ingest {
            run_dirs,
            store,
            branch,
        } => commands::history::ingest(&run_dirs, &store.url(&settings)?, branch.as_deref()),
        Command::History {
            cases,
            store,
            only,
            last,
            format,
            changes,
            metric,
        } => commands::history::history(
            &store.url(&settings)?,
            &crate::store::Query {
                specs: cases,
                device: only.device,
                branch: only.branch,
                last,
            },
            format,
            changes.then_some(metric),
        ),
        Command::Report {
            run_dir,
            template,
            out,
        } => commands::render::report(&run_dir, template.as_deref(), out.as_deref()),
        measuring => unreachable!("dispatched before: {measuring:?}"),
    }
}
