//! The SVG chart of the per-round ratios (warden / direct), written by hand
//! (no plotting dependency); `report` writes it next to the table.

use std::fmt::Write as _;

/// A chart series: a name, a colour and one value per round.
pub struct Series {
    /// Legend text.
    pub name: &'static str,
    /// SVG colour.
    pub colour: &'static str,
    /// Per-round values.
    pub values: Vec<f64>,
}

/// The picture's geometry (pixels) and the range of ratios it shows.
struct Frame {
    w: f64,
    h: f64,
    left: f64,
    top: f64,
    /// Plot width.
    pw: f64,
    /// Plot height.
    ph: f64,
    lo: f64,
    hi: f64,
    /// Rounds on the x axis (at least 2).
    rounds: usize,
}

impl Frame {
    fn new(series: &[Series]) -> Self {
        let (w, h) = (760.0, 380.0);
        let (left, right, top, bottom) = (60.0, 200.0, 40.0, 40.0);
        let all: Vec<f64> = series
            .iter()
            .flat_map(|s| s.values.iter().copied())
            .filter(|v| v.is_finite())
            .collect();
        Self {
            w,
            h,
            left,
            top,
            pw: w - left - right,
            ph: h - top - bottom,
            lo: all.iter().copied().fold(0.95_f64, f64::min) - 0.02,
            hi: all.iter().copied().fold(1.10_f64, f64::max) + 0.02,
            rounds: series.iter().map(|s| s.values.len()).max().unwrap_or(1).max(2),
        }
    }

    fn x(&self, i: usize) -> f64 {
        self.left + self.pw * i as f64 / (self.rounds - 1) as f64
    }

    fn y(&self, v: f64) -> f64 {
        self.top + self.ph * (self.hi - v) / (self.hi - self.lo)
    }
}

/// The SVG line chart of per-round ratios (warden / direct), with the 1.0
/// parity line and the decode (0.99) and cold (1.05) targets.
pub fn svg(title: &str, series: &[Series]) -> String {
    let f = Frame::new(series);
    let (w, h, left) = (f.w, f.h, f.left);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(s, r#"<text x="{left}" y="22" font-size="14">{}</text>"#, escape(title));
    grid(&mut s, &f);
    targets(&mut s, &f);
    round_axis(&mut s, &f);
    for (k, se) in series.iter().enumerate() {
        plot(&mut s, &f, k, se);
    }
    s.push_str("</svg>\n");
    s
}

/// Horizontal grid, every 0.05.
fn grid(s: &mut String, f: &Frame) {
    let left = f.left;
    let mut g = (f.lo / 0.05).ceil() * 0.05;
    while g <= f.hi {
        let _ = writeln!(
            s,
            r##"<line x1="{left}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{g:.2}</text>"##,
            left + f.pw,
            left - 6.0,
            f.y(g) + 4.0,
            y = f.y(g)
        );
        g += 0.05;
    }
}

/// The parity line and the targets, dashed and labelled on the right.
fn targets(s: &mut String, f: &Frame) {
    let left = f.left;
    for (v, label, dash, dy) in [
        (1.0, "parity", "6 3", -2.0),
        (0.99, "decode target", "2 3", 10.0),
        (1.05, "cold target", "2 3", 4.0),
    ] {
        let _ = writeln!(
            s,
            r##"<line x1="{left}" x2="{}" y1="{yy:.1}" y2="{yy:.1}" stroke="#555" stroke-dasharray="{dash}"/><text x="{}" y="{:.1}" fill="#555">{label}</text>"##,
            left + f.pw,
            left + f.pw + 4.0,
            f.y(v) + dy,
            yy = f.y(v)
        );
    }
}

/// The round numbers under the plot, and the axis title.
fn round_axis(s: &mut String, f: &Frame) {
    for i in 0..f.rounds {
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
            f.x(i),
            f.top + f.ph + 18.0,
            i + 1
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{}" text-anchor="middle">round</text>"#,
        f.left + f.pw / 2.0,
        f.h - 6.0
    );
}

/// Series `k`: its line, a dot per round, its legend entry.
fn plot(s: &mut String, f: &Frame, k: usize, se: &Series) {
    let pts: Vec<String> = se
        .values
        .iter()
        .enumerate()
        .filter(|(_, v)| v.is_finite())
        .map(|(i, v)| format!("{:.1},{:.1}", f.x(i), f.y(*v)))
        .collect();
    let _ = writeln!(
        s,
        r#"<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>"#,
        se.colour,
        pts.join(" ")
    );
    for p in &pts {
        let (px, py) = p.split_once(',').unwrap_or(("0", "0"));
        let _ = writeln!(s, r#"<circle cx="{px}" cy="{py}" r="3" fill="{}"/>"#, se.colour);
    }
    let ly = f.top + 16.0 * k as f64;
    let _ = writeln!(
        s,
        r#"<rect x="{}" y="{:.1}" width="12" height="4" fill="{}"/><text x="{}" y="{:.1}">{}</text>"#,
        f.left + f.pw + 90.0,
        ly - 4.0,
        se.colour,
        f.left + f.pw + 106.0,
        ly + 1.0,
        escape(se.name)
    );
}

fn escape(t: &str) -> String {
    t.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}
