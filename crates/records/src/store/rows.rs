//! Rows decoded into points: the columns read, by position; texts many points share read once;
//! a reader's points put in case, then start, order.

use super::*;

/// The most rows a read makes room for at once (more grow the vectors as they come): row ids
/// with gaps (rows deleted) or a filter that keeps few rows would otherwise reserve memory that
/// is never used.
pub(super) const MAX_ROOM: usize = 1 << 21;

/// One case's points as one reader read them.
pub(super) struct CaseRead {
    name: Text,
    pub(super) points: Vec<Point>,
    /// The points are known to be in start order ([`CaseRows::put_in_start_order`]).
    in_order: bool,
}

/// Case rows one reader read, gathered by case as they come: put in the store's order, each
/// case is then moved once, whole, instead of half a million points being put in order one by
/// one (a permutation of large points, most of its moves cache misses: docs/history.md).
pub(super) struct CaseRows {
    pub(super) cases: Vec<CaseRead>,
    /// A case's place in `cases`, by name.
    index: std::collections::HashMap<Text, usize>,
    /// The room a case's vector is made with when its first row comes.
    room: usize,
}

impl CaseRows {
    pub(super) fn with_room(room: usize) -> CaseRows {
        CaseRows {
            cases: Vec::new(),
            index: std::collections::HashMap::new(),
            room,
        }
    }

    /// Adds the point `make` makes (given the case's shared name) to case `spec`'s.
    pub(super) fn push(&mut self, spec: &str, make: impl FnOnce(Text) -> Point) {
        let k = match self.index.get(spec) {
            Some(k) => *k,
            None => {
                let name: Text = spec.into();
                self.cases.push(CaseRead {
                    name: name.clone(),
                    points: Vec::with_capacity(self.room),
                    in_order: false,
                });
                self.index.insert(name, self.cases.len() - 1);
                self.cases.len() - 1
            }
        };
        let case = &mut self.cases[k];
        let point = make(case.name.clone());
        case.points.push(point);
        case.in_order = false;
    }

    /// Puts each case's points in start order: each reader its own, on its own core, so that
    /// [`in_case_order`] only looks where two readers' points of a case meet.
    pub(super) fn put_in_start_order(&mut self) {
        for case in &mut self.cases {
            in_start_order(&mut case.points);
            case.in_order = true;
        }
    }
}

/// Points in the store's order: by case, then start, then run. Each case's rows come in the
/// order read (the table's, in which a case's runs mostly come oldest first already; the first
/// reader's before the second's); a case is sorted only where it is not in order yet — where
/// each read is in order already, only where two reads meet is looked at.
pub(super) fn in_case_order(parts: Vec<CaseRows>) -> Vec<Point> {
    let total = parts
        .iter()
        .flat_map(|p| &p.cases)
        .map(|c| c.points.len())
        .sum();
    let mut cases: Vec<CaseRead> = parts.into_iter().flat_map(|p| p.cases).collect();
    // By name, stably: one case's reads stay in the readers' order.
    cases.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out: Vec<Point> = Vec::with_capacity(total);
    // Every point of the store is some 200 bytes, half a million of them 100 MB: copied here
    // into pages faulted in every 4 KiB, the faults took more time than the copy (docs/history.md).
    opledger_model::kinds::tensors::advise_huge_pages_for(&mut out);
    let mut at = 0;
    while at < cases.len() {
        let start = out.len();
        let name = cases[at].name.clone();
        let mut in_order = true;
        while let Some(case) = cases.get_mut(at).filter(|c| c.name == name) {
            let meets_in_order = match (out[start..].last(), case.points.first()) {
                (Some(last), Some(first)) => start_order(last, first).is_le(),
                _ => true,
            };
            in_order &= case.in_order && meets_in_order;
            out.append(&mut case.points);
            at += 1;
        }
        if !in_order {
            in_start_order(&mut out[start..]);
        }
    }
    out
}

/// The store's order of two points of one case: by start (as a number, then its nanoseconds),
/// the texts compared only where those tie (half a million heap texts compared directly cost
/// far more: docs/history.md).
fn start_order(a: &Point, b: &Point) -> std::cmp::Ordering {
    let (ra, rb) = (&a.run, &b.run);
    (ra.order.started, ra.order.started_ns)
        .cmp(&(rb.order.started, rb.order.started_ns))
        .then_with(|| {
            (&*ra.started_utc, &*ra.run_id, &*ra.order.key).cmp(&(
                &*rb.started_utc,
                &*rb.run_id,
                &*rb.order.key,
            ))
        })
}

/// One case's points in start order ([`start_order`]), sorted only where out of it.
pub(super) fn in_start_order(points: &mut [Point]) {
    if points.is_sorted_by(|a, b| start_order(a, b).is_le()) {
        return;
    }
    let mut order: Vec<usize> = (0..points.len()).collect();
    order.sort_unstable_by(|a, b| start_order(&points[*a], &points[*b]));
    permute(points, &order);
}

/// Puts `v[order[k]]` at `k` for every `k`, in place (`order` a permutation of `v`'s indices),
/// following each cycle of the permutation with swaps.
pub(super) fn permute<T>(v: &mut [T], order: &[usize]) {
    let mut done = vec![false; v.len()];
    for start in 0..v.len().min(order.len()) {
        if done[start] {
            continue;
        }
        let mut k = start;
        while order[k] != start {
            v.swap(k, order[k]);
            done[k] = true;
            k = order[k];
        }
        done[k] = true;
    }
}

/// `YYYY-MM-DDTHH:MM:SSZ` as the number YYYYMMDDHHMMSS, which orders as the text does; any
/// other text as 0 (its order is then the text's, compared where the numbers tie).
pub(super) fn utc_number(utc: &str) -> u64 {
    if utc.len() != 20 {
        return 0;
    }
    let (mut n, mut digits) = (0u64, 0);
    for d in utc.bytes().filter(u8::is_ascii_digit) {
        n = n * 10 + u64::from(d - b'0');
        digits += 1;
    }
    if digits == 14 {
        n
    } else {
        0
    }
}

/// The texts of points read in one query, each distinct text held once and shared by every
/// point that has it. A column's text is first compared with that column's in the row before:
/// rows come a run's cases together, or a case's runs together, so most texts repeat it.
#[derive(Default)]
pub(super) struct Texts {
    all: std::collections::HashSet<Text>,
    last: Vec<Option<Text>>,
    /// Counts engines by what names them in a row: the store's by their digests, and those of
    /// rows recorded before engines were kept apart by their JSON, each parsed once (parsed
    /// per row, it was most of the time of a counted store's every point).
    engines: std::collections::HashMap<Text, Option<Engine>>,
    last_engine: Option<(Text, Option<Engine>)>,
}

/// A counts engine that many points share.
pub(super) type Engine = std::sync::Arc<crate::measure::counts::CountsEngine>;

impl Texts {
    /// Texts of a query of a store whose engines are `named` by their digests. Each reader has
    /// engines of its own: every counted point holds its engine, and two readers raising the
    /// count of one shared engine half a million times between them pass its line from core to
    /// core at every point (docs/history.md).
    pub(super) fn naming(named: &Engines) -> Texts {
        Texts {
            engines: named
                .iter()
                .map(|(digest, e)| {
                    let own: Engine = std::sync::Arc::new((**e).clone());
                    (Text::from(digest.as_str()), Some(own))
                })
                .collect(),
            ..Texts::default()
        }
    }

    /// The counts engine an engine column names: by its digest, or (rows recorded before
    /// engines were kept apart) by its JSON; `None` where it names none.
    fn engine(&mut self, s: &str) -> Option<Engine> {
        if let Some((_, engine)) = self.last_engine.as_ref().filter(|(t, _)| **t == *s) {
            return engine.clone();
        }
        let engine = match self.engines.get(s) {
            Some(e) => e.clone(),
            None => {
                let e = s
                    .starts_with('{')
                    .then(|| serde_json::from_str(s).ok().map(std::sync::Arc::new))
                    .flatten();
                self.engines.insert(s.into(), e.clone());
                e
            }
        };
        self.last_engine = Some((s.into(), engine.clone()));
        engine
    }

    /// The shared text of column `column`.
    pub(super) fn of(&mut self, column: usize, s: &str) -> Text {
        if self.last.len() <= column {
            self.last.resize(column + 1, None);
        }
        if let Some(t) = self.last[column].as_ref().filter(|t| ***t == *s) {
            return t.clone();
        }
        let t = match self.all.get(s) {
            Some(t) => t.clone(),
            None => {
                let t: Text = s.into();
                self.all.insert(t.clone());
                t
            }
        };
        self.last[column] = Some(t.clone());
        t
    }
}

/// The columns of a run that each of its cases' points holds, in this order.
pub(super) const RUN_COLUMNS: &str = "r.run_id, r.started_utc, r.git_sha, r.git_dirty, r.branch, r.device_key, r.archive, r.started_ns, r.run_key";

pub(super) const RUN_COLUMN_COUNT: usize = 9;

/// The columns of a case row a point is made of, in this order.
pub(super) const CASE_COLUMNS: &str = "c.spec, c.verdict, c.before_median_secs, c.after_median_secs, c.ratio, c.ratio_lo, c.ratio_hi,
    c.before_ci_lo_secs, c.before_ci_hi_secs, c.after_ci_lo_secs, c.after_ci_hi_secs, c.baseline_status,
    c.counts_key, c.before_instructions, c.after_instructions, c.before_dram_bytes, c.after_dram_bytes, c.before_cycles, c.after_cycles, c.counts_engine,
    c.run_key";

pub(super) const CASE_RUN_KEY: usize = 20;

/// What a run gives each of its cases' points, shared.
pub(super) type Run = std::sync::Arc<PointRun>;

/// A run's fields from the values of [`RUN_COLUMNS`], its texts shared through `texts`.
pub(super) fn run_fields(r: &[ValRef<'_>], texts: &mut Texts) -> Run {
    let at = |i: usize| r.get(i).copied().unwrap_or(ValRef::Null);
    let mut text = |i: usize| at(i).text().map(|s| texts.of(i, s));
    let started_utc = text(1).unwrap_or_default();
    std::sync::Arc::new(PointRun {
        run_id: text(0).unwrap_or_default(),
        git_sha: text(2).unwrap_or_default(),
        git_dirty: at(3).int().unwrap_or(0) != 0,
        branch: text(4),
        device_key: text(5).unwrap_or_default(),
        archive: text(6).unwrap_or_default(),
        order: RunOrder {
            started: utc_number(&started_utc),
            started_ns: at(7).int().unwrap_or(0),
            key: at(8).text().map(Text::from).unwrap_or_default(),
        },
        started_utc,
    })
}

/// A point of `run` from the values of [`CASE_COLUMNS`], its texts shared through `texts`.
pub(super) fn point(run: &Run, c: &[ValRef<'_>], spec: Text, texts: &mut Texts) -> Point {
    let at = |i: usize| c.get(i).copied().unwrap_or(ValRef::Null);
    // Case columns are cached apart from the run's (their positions overlap).
    let verdict = at(1).text().map(|s| texts.of(101, s));
    let real = |i: usize| at(i).real();
    let count = |i: usize| at(i).int().and_then(|v| u64::try_from(v).ok());
    Point {
        run: run.clone(),
        spec,
        verdict: verdict.unwrap_or_default(),
        before_median_secs: real(2),
        after_median_secs: real(3),
        ratio: real(4),
        ratio_lo: real(5),
        ratio_hi: real(6),
        before_ci_lo_secs: real(7),
        before_ci_hi_secs: real(8),
        after_ci_lo_secs: real(9),
        after_ci_hi_secs: real(10),
        accepted: at(11).text() == Some("accepted"),
        counts: at(12).text().map(|key| {
            Box::new(PointCounts {
                key: texts.of(112, key),
                engine: at(19).text().and_then(|t| texts.engine(t)),
                before_instructions: count(13),
                after_instructions: count(14),
                before_dram_bytes: count(15),
                after_dram_bytes: count(16),
                before_cycles: count(17),
                after_cycles: count(18),
            })
        }),
    }
}
