//! The Prometheus text exposition format (version 0.0.4), written by hand:
//! a family's `# HELP` and `# TYPE` lines, samples with escaped label
//! values, and histograms as `_bucket{le=…}` (cumulative, ending in
//! `+Inf`), `_sum` and `_count`.
//!
//! Invariant: every family is announced once, before its samples, and a
//! histogram's `+Inf` bucket equals its `_count`.

use std::fmt::Write as _;

use boxcar_queue::metrics::HistogramSnapshot;

/// A metric family's type.
#[derive(Clone, Copy)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// Text being written.
#[derive(Default)]
pub struct Exposition {
    out: String,
}

impl Exposition {
    /// Announces the family `name`.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) {
        let kind = match kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    /// One sample of `name` with `labels`.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.out.push_str(name);
        self.labels(labels, None);
        let _ = writeln!(self.out, " {value}");
    }

    /// The samples of histogram `name` with `labels`.
    pub fn histogram(&mut self, name: &str, labels: &[(&str, &str)], h: &HistogramSnapshot) {
        for (le, n) in &h.buckets {
            let _ = write!(self.out, "{name}_bucket");
            self.labels(labels, Some(&le.to_string()));
            let _ = writeln!(self.out, " {n}");
        }
        let _ = write!(self.out, "{name}_bucket");
        self.labels(labels, Some("+Inf"));
        let _ = writeln!(self.out, " {}", h.count);
        self.sample(&format!("{name}_sum"), labels, h.sum_seconds);
        self.sample(&format!("{name}_count"), labels, h.count);
    }

    fn labels(&mut self, labels: &[(&str, &str)], le: Option<&str>) {
        if labels.is_empty() && le.is_none() {
            return;
        }
        self.out.push('{');
        let all = labels.iter().copied().chain(le.map(|le| ("le", le)));
        for (i, (k, v)) in all.enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            let _ = write!(self.out, "{k}=\"{}\"", escape(v));
        }
        self.out.push('}');
    }

    /// The text.
    pub fn finish(self) -> String {
        self.out
    }
}

/// A label value as the format spells it.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_end_in_inf_and_labels_are_escaped() {
        let mut e = Exposition::default();
        e.family("x_seconds", Kind::Histogram, "X.");
        let h = HistogramSnapshot {
            buckets: vec![(0.5, 1), (1.0, 2)],
            count: 3,
            sum_seconds: 2.5,
        };
        e.histogram("x_seconds", &[("t", "a\"b")], &h);
        assert_eq!(
            e.finish(),
            "# HELP x_seconds X.\n# TYPE x_seconds histogram\n\
             x_seconds_bucket{t=\"a\\\"b\",le=\"0.5\"} 1\n\
             x_seconds_bucket{t=\"a\\\"b\",le=\"1\"} 2\n\
             x_seconds_bucket{t=\"a\\\"b\",le=\"+Inf\"} 3\n\
             x_seconds_sum{t=\"a\\\"b\"} 2.5\n\
             x_seconds_count{t=\"a\\\"b\"} 3\n"
        );
    }
}
