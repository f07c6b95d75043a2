//! Sharding a run over machines that an outside engine schedules (Slurm job arrays, Kubernetes
//! Indexed Jobs, CI matrices): `--shard hash:M/N | count:M/N | auto` keeps the cases of shard M
//! of N (1-based, as `cargo nextest --partition`).
//!
//! - `hash`: a case belongs to the shard its name hashes to (SHA-256), so adding a spec moves no
//!   other case between shards.
//! - `count`: round-robin over the cases sorted by name: shards as even as they can be.
//! - `auto`: hash, with M and N from the engine's environment: Slurm's `SLURM_ARRAY_TASK_ID`,
//!   `SLURM_ARRAY_TASK_MIN`, `SLURM_ARRAY_TASK_STEP` and `SLURM_ARRAY_TASK_COUNT` (array ids need
//!   not start at 0 or step by 1), Kubernetes' `JOB_COMPLETION_INDEX` with `OPLEDGER_SHARD_TOTAL`
//!   (Kubernetes exports no total), or `OPLEDGER_SHARD=M/N` (a CI matrix passes its own).

use crate::error::{Error, Result};

/// How cases are dealt to shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Hash,
    Count,
}

/// Shard `index` (1-based) of `total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub mode: Mode,
    pub index: u64,
    pub total: u64,
    /// Where M and N came from, for the log (`--shard`, `Slurm array`, …).
    pub source: &'static str,
}

/// Largest number of shards accepted.
const MAX_SHARDS: u64 = 100_000;

fn bad(message: String) -> Error {
    Error::Shard(message)
}

/// `M/N` with 1 <= M <= N.
fn fraction(text: &str, what: &str) -> Result<(u64, u64)> {
    let (m, n) = text
        .split_once('/')
        .ok_or_else(|| bad(format!("{what} {text:?}: expected M/N, such as 2/5")))?;
    let parse = |s: &str| s.trim().parse::<u64>().ok();
    match (parse(m), parse(n)) {
        (Some(m), Some(n)) if m >= 1 && m <= n && n <= MAX_SHARDS => Ok((m, n)),
        _ => Err(bad(format!(
            "{what} {text:?}: expected M/N with 1 <= M <= N <= {MAX_SHARDS}"
        ))),
    }
}

impl Shard {
    /// Parses `--shard`; `auto` reads the environment through `var`.
    pub fn parse(text: &str, var: &dyn Fn(&str) -> Option<String>) -> Result<Shard> {
        if text == "auto" {
            return Shard::from_env(var);
        }
        let (mode, rest) = match text.split_once(':') {
            Some(("hash", rest)) => (Mode::Hash, rest),
            Some(("count", rest)) => (Mode::Count, rest),
            _ => {
                return Err(bad(format!(
                    "{text:?}: expected hash:M/N, count:M/N or auto"
                )))
            }
        };
        let (index, total) = fraction(rest, "shard")?;
        Ok(Shard {
            mode,
            index,
            total,
            source: "--shard",
        })
    }

    /// The shard the scheduling engine's environment names.
    pub fn from_env(var: &dyn Fn(&str) -> Option<String>) -> Result<Shard> {
        let int = |name: &str| -> Result<Option<i64>> {
            match var(name) {
                None => Ok(None),
                Some(v) => v
                    .trim()
                    .parse::<i64>()
                    .map(Some)
                    .map_err(|_| bad(format!("auto: {name}={v:?} is not a whole number"))),
            }
        };
        let shard = |index: u64, total: u64, source| Shard {
            mode: Mode::Hash,
            index,
            total,
            source,
        };
        if let Some(id) = int("SLURM_ARRAY_TASK_ID")? {
            let min = int("SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
            let step = int("SLURM_ARRAY_TASK_STEP")?.unwrap_or(1);
            let count = int("SLURM_ARRAY_TASK_COUNT")?.ok_or_else(|| {
                bad("auto: SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT is not".into())
            })?;
            let read =
                format!("SLURM_ARRAY_TASK_ID={id}, _MIN={min}, _STEP={step}, _COUNT={count}");
            if step < 1 || count < 1 || id < min || (id - min) % step != 0 {
                return Err(bad(format!(
                    "auto: {read}: the task is not one of the array's ids"
                )));
            }
            let index = (id - min) / step + 1;
            if index > count || count as u64 > MAX_SHARDS {
                return Err(bad(format!(
                    "auto: {read}: task {index} of an array of {count}"
                )));
            }
            return Ok(shard(index as u64, count as u64, "Slurm array"));
        }
        if let Some(i) = int("JOB_COMPLETION_INDEX")? {
            let total = var("OPLEDGER_SHARD_TOTAL").ok_or_else(|| {
                bad("auto: JOB_COMPLETION_INDEX is set (a Kubernetes Indexed Job) but OPLEDGER_SHARD_TOTAL is not: set it to the Job's completions".into())
            })?;
            let (index, total) = fraction(
                &format!("{}/{}", i + 1, total.trim()),
                &format!("auto: JOB_COMPLETION_INDEX={i}, OPLEDGER_SHARD_TOTAL={total}:"),
            )?;
            return Ok(shard(index, total, "Kubernetes indexed job"));
        }
        if let Some(s) = var("OPLEDGER_SHARD") {
            let (index, total) = fraction(&s, "auto: OPLEDGER_SHARD")?;
            return Ok(shard(index, total, "OPLEDGER_SHARD"));
        }
        Err(bad(
            "auto: none of SLURM_ARRAY_TASK_ID, JOB_COMPLETION_INDEX or OPLEDGER_SHARD is set"
                .into(),
        ))
    }

    /// Which of the cases named `names` this shard runs.
    pub fn keeps(&self, names: &[&str]) -> Vec<bool> {
        match self.mode {
            Mode::Hash => names
                .iter()
                .map(|n| {
                    let digest = crate::spec::sha256_hex(n.as_bytes());
                    let h = u64::from_str_radix(&digest[..16], 16).unwrap_or(0);
                    h % self.total == self.index - 1
                })
                .collect(),
            Mode::Count => {
                let mut order: Vec<usize> = (0..names.len()).collect();
                order.sort_by_key(|&i| names[i]);
                let mut keep = vec![false; names.len()];
                for (rank, &i) in order.iter().enumerate() {
                    keep[i] = rank as u64 % self.total == self.index - 1;
                }
                keep
            }
        }
    }

    pub fn describe(&self) -> String {
        format!(
            "shard {}/{} ({}, {})",
            self.index,
            self.total,
            match self.mode {
                Mode::Hash => "hash",
                Mode::Count => "count",
            },
            self.source
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn shards_partition_the_cases_and_hash_keeps_its_cases_when_one_is_added() {
        let names: Vec<String> = (0..50).map(|i| format!("spec-{i}--n-{}", i * 7)).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        for mode in ["hash", "count"] {
            let mut owner = vec![0; refs.len()];
            for m in 1..=3 {
                let s = Shard::parse(&format!("{mode}:{m}/3"), &env(&[])).unwrap();
                for (i, k) in s.keeps(&refs).into_iter().enumerate() {
                    if k {
                        assert_eq!(owner[i], 0, "{mode}: case {i} in two shards");
                        owner[i] = m;
                    }
                }
            }
            assert!(owner.iter().all(|&o| o > 0), "{mode}: a case in no shard");
            if mode == "count" {
                let sizes: Vec<usize> = (1..=3)
                    .map(|m| owner.iter().filter(|&&o| o == m).count())
                    .collect();
                assert_eq!(sizes, [17, 17, 16]);
            }
        }
        // Hash: one more spec moves none of the others.
        let s = Shard::parse("hash:2/3", &env(&[])).unwrap();
        let before = s.keeps(&refs);
        let mut more = refs.clone();
        more.push("a-new-spec");
        assert_eq!(&s.keeps(&more)[..refs.len()], &before[..]);
    }

    #[test]
    fn auto_reads_slurm_kubernetes_and_ci_and_refuses_what_does_not_add_up() {
        // --array=1-7:2: ids 1, 3, 5, 7.
        let slurm = [
            ("SLURM_ARRAY_TASK_ID", "5"),
            ("SLURM_ARRAY_TASK_MIN", "1"),
            ("SLURM_ARRAY_TASK_STEP", "2"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
        ];
        let s = Shard::parse("auto", &env(&slurm)).unwrap();
        assert_eq!((s.index, s.total, s.mode), (3, 4, Mode::Hash));
        let k8s = Shard::parse(
            "auto",
            &env(&[("JOB_COMPLETION_INDEX", "0"), ("OPLEDGER_SHARD_TOTAL", "8")]),
        )
        .unwrap();
        assert_eq!((k8s.index, k8s.total), (1, 8));
        let ci = Shard::parse("auto", &env(&[("OPLEDGER_SHARD", "2/2")])).unwrap();
        assert_eq!((ci.index, ci.total), (2, 2));
        for (vars, said) in [
            (vec![], "none of SLURM_ARRAY_TASK_ID"),
            (
                vec![("SLURM_ARRAY_TASK_ID", "4"), ("SLURM_ARRAY_TASK_MIN", "1"), ("SLURM_ARRAY_TASK_STEP", "2"), ("SLURM_ARRAY_TASK_COUNT", "4")],
                "SLURM_ARRAY_TASK_ID=4, _MIN=1, _STEP=2, _COUNT=4: the task is not one of the array's ids",
            ),
            (vec![("SLURM_ARRAY_TASK_ID", "3")], "SLURM_ARRAY_TASK_COUNT is not"),
            (vec![("JOB_COMPLETION_INDEX", "2")], "OPLEDGER_SHARD_TOTAL is not"),
            (
                vec![("JOB_COMPLETION_INDEX", "8"), ("OPLEDGER_SHARD_TOTAL", "8")],
                "JOB_COMPLETION_INDEX=8, OPLEDGER_SHARD_TOTAL=8:",
            ),
            (vec![("OPLEDGER_SHARD", "0/3")], "expected M/N with 1 <= M <= N"),
            (vec![("JOB_COMPLETION_INDEX", "x")], "JOB_COMPLETION_INDEX=\"x\" is not a whole number"),
        ] {
            let e = Shard::parse("auto", &env(&vars)).unwrap_err().to_string();
            assert!(e.contains(said), "{vars:?}: {e}");
        }
        for bad in ["hash", "hash:3/2", "rand:1/2", "count:1/0", "count:a/b"] {
            assert!(Shard::parse(bad, &env(&[])).is_err(), "{bad}");
        }
    }
}
