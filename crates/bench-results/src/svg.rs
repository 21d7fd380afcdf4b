//! Small inline-SVG line plots: linear, log10 and "nines" (percentile) axes, ticks, grid,
//! legend, an optional shaded x-range and optional categorical x labels. All text is
//! escaped; non-finite points are dropped (and non-positive ones on log axes).

use std::fmt::Write;

/// HTML/XML text and attribute escaping.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Series colours (Okabe-Ito + extras), cycled.
pub const PALETTE: &[&str] =
    &["#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000", "#8c564b", "#7f7f7f", "#bcbd22"];

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scale {
    Linear,
    Log10,
    /// Percentiles in (0, 100): position is -log10(1 - p/100), so 90, 99, 99.9 are evenly spaced.
    Nines,
}

impl Scale {
    fn map(self, v: f64) -> Option<f64> {
        let m = match self {
            Scale::Linear => v,
            Scale::Log10 if v > 0.0 => v.log10(),
            Scale::Log10 => return None,
            Scale::Nines if (0.0..100.0).contains(&v) => -(1.0 - v / 100.0).log10(),
            Scale::Nines if v >= 100.0 => 6.0,
            Scale::Nines => return None,
        };
        m.is_finite().then_some(m)
    }
}

#[derive(Clone, Debug)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    pub dashed: bool,
    /// Overrides the palette colour.
    pub colour: Option<&'static str>,
}

impl Series {
    pub fn new(label: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Series { label: label.into(), points, dashed: false, colour: None }
    }
    pub fn dashed(mut self) -> Self {
        self.dashed = true;
        self
    }
    pub fn colour(mut self, colour: &'static str) -> Self {
        self.colour = Some(colour);
        self
    }
}

#[derive(Clone, Debug)]
pub struct Plot {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_scale: Scale,
    pub y_scale: Scale,
    pub series: Vec<Series>,
    /// Replace numeric x ticks by these (position, label) pairs (categorical axes).
    pub x_ticks: Option<Vec<(f64, String)>>,
    /// Shade this x interval (e.g. the steady-state window) with a caption.
    pub shade_x: Option<(f64, f64, String)>,
    /// Start the y axis at zero (linear scale only).
    pub y_from_zero: bool,
    pub width: f64,
    pub height: f64,
}

impl Plot {
    pub fn new(title: impl Into<String>, x_label: impl Into<String>, y_label: impl Into<String>) -> Self {
        Plot {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            x_scale: Scale::Linear,
            y_scale: Scale::Linear,
            series: Vec::new(),
            x_ticks: None,
            shade_x: None,
            y_from_zero: true,
            width: 570.0,
            height: 330.0,
        }
    }

    /// Log y when the data spans more than `ratio` (and is positive).
    pub fn auto_log_y(mut self, ratio: f64) -> Self {
        let ys: Vec<f64> =
            self.series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).filter(|y| y.is_finite()).collect();
        let lo = ys.iter().cloned().fold(f64::INFINITY, f64::min);
        let hi = ys.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        if lo > 0.0 && hi / lo > ratio {
            self.y_scale = Scale::Log10;
        }
        self
    }

    pub fn render(&self) -> String {
        render(self)
    }
}

/// Compact number: 1.2M, 350k, 12.5, 0.25.
pub fn si(v: f64) -> String {
    let a = v.abs();
    let (x, suffix) = if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e4 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let xa = x.abs();
    let s = if xa == 0.0 || xa >= 100.0 || (xa.fract() == 0.0 && xa >= 1.0) {
        format!("{x:.0}")
    } else if xa >= 10.0 {
        format!("{x:.1}")
    } else if xa >= 0.01 {
        format!("{x:.2}")
    } else {
        format!("{x:.1e}")
    };
    let s =
        if s.contains('.') && !s.contains('e') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s };
    format!("{s}{suffix}")
}

/// "Nice" linear ticks covering [lo, hi].
fn linear_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let span = (hi - lo).max(f64::MIN_POSITIVE);
    let raw = span / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|k| k * mag).find(|s| span / s <= 6.0).unwrap_or(10.0 * mag);
    let start = (lo / step).ceil() * step;
    (0..).map(|i| start + i as f64 * step).take_while(|t| *t <= hi + step * 1e-9).take(20).collect()
}

/// Axis range (in mapped space) and ticks (value, mapped position).
fn axis(scale: Scale, values: &[f64], from_zero: bool) -> (f64, f64, Vec<(f64, f64)>) {
    let mapped: Vec<f64> = values.iter().filter_map(|v| scale.map(*v)).collect();
    let mut lo = mapped.iter().cloned().fold(f64::INFINITY, f64::min);
    let mut hi = mapped.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    if !lo.is_finite() {
        (lo, hi) = (0.0, 1.0);
    }
    match scale {
        Scale::Linear => {
            if from_zero && lo > 0.0 {
                lo = 0.0;
            }
            if hi - lo < 1e-12 {
                hi = lo + lo.abs().max(1.0);
            } else {
                hi += (hi - lo) * 0.05;
            }
            let ticks = linear_ticks(lo, hi);
            if let (Some(f), Some(l)) = (ticks.first(), ticks.last()) {
                lo = lo.min(*f);
                hi = hi.max(*l);
            }
            let ticks = ticks.into_iter().map(|t| (t, t)).collect();
            (lo, hi, ticks)
        }
        Scale::Log10 => {
            lo = lo.floor();
            hi = hi.ceil().max(lo + 1.0);
            let decades = (hi - lo) as i32;
            let mut ticks = Vec::new();
            for d in lo as i32..=hi as i32 {
                let base = 10f64.powi(d);
                ticks.push((base, d as f64));
                if decades <= 2 && d < hi as i32 {
                    for k in [2.0, 5.0] {
                        ticks.push((base * k, (base * k).log10()));
                    }
                }
            }
            (lo, hi, ticks)
        }
        Scale::Nines => {
            lo = 0.0;
            hi = hi.ceil().clamp(2.0, 6.0);
            let ticks = [0.0, 90.0, 99.0, 99.9, 99.99, 99.999, 99.9999]
                .iter()
                .filter_map(|p| scale.map(*p).map(|m| (*p, m)))
                .filter(|(_, m)| *m <= hi + 1e-9)
                .collect();
            (lo, hi, ticks)
        }
    }
}

const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 44.0;

fn render(p: &Plot) -> String {
    let xs: Vec<f64> = p.series.iter().flat_map(|s| s.points.iter().map(|q| q.0)).filter(|v| v.is_finite()).collect();
    let ys: Vec<f64> = p.series.iter().flat_map(|s| s.points.iter().map(|q| q.1)).filter(|v| v.is_finite()).collect();
    let (x0, x1, mut xticks) = axis(p.x_scale, &xs, false);
    let (x0, x1) = if x1 - x0 < 1e-12 { (x0 - 0.5, x1 + 0.5) } else { (x0, x1) };
    // Pad a categorical / single-point x axis so markers are not on the frame.
    let (x0, x1) = if p.x_ticks.is_some() { (x0 - 0.5, x1 + 0.5) } else { (x0, x1) };
    let (y0, y1, yticks) = axis(p.y_scale, &ys, p.y_from_zero);

    let legend_rows = p.series.len().div_ceil(3);
    let legend_h = 16.0 * legend_rows as f64 + if legend_rows > 0 { 6.0 } else { 0.0 };
    let (w, h) = (p.width, p.height);
    let pw = w - LEFT - RIGHT;
    let ph = h - TOP - BOTTOM;
    let total_h = h + legend_h;
    let sx = |m: f64| LEFT + (m - x0) / (x1 - x0) * pw;
    let sy = |m: f64| TOP + ph - (m - y0) / (y1 - y0) * ph;

    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="plot" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{total_h}" viewBox="0 0 {w} {total_h}" role="img" aria-label="{t}"><title>{t}</title>"#,
        t = esc(&p.title)
    );
    let _ = write!(s, r##"<rect x="0" y="0" width="{w}" height="{total_h}" fill="#fff"/>"##);
    let _ = write!(s, r#"<text x="{}" y="18" class="pt" text-anchor="middle">{}</text>"#, w / 2.0, esc(&p.title));

    if let Some((a, b, caption)) = &p.shade_x {
        if let (Some(ma), Some(mb)) = (p.x_scale.map(*a), p.x_scale.map(*b)) {
            let (ax, bx) = (sx(ma).max(LEFT), sx(mb).min(LEFT + pw));
            let _ = write!(
                s,
                r##"<rect x="{ax:.1}" y="{TOP}" width="{:.1}" height="{ph}" fill="#e69f00" fill-opacity="0.15"/><text x="{:.1}" y="{:.1}" class="tk" text-anchor="middle">{}</text>"##,
                (bx - ax).max(1.0),
                (ax + bx) / 2.0,
                TOP + ph - 6.0,
                esc(caption)
            );
        }
    }

    // Grid and y ticks.
    for (v, m) in &yticks {
        if *m < y0 - 1e-9 || *m > y1 + 1e-9 {
            continue;
        }
        let y = sy(*m);
        let _ = write!(
            s,
            r##"<line x1="{LEFT}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="#e3e3e3"/><text x="{:.1}" y="{:.1}" class="tk" text-anchor="end">{}</text>"##,
            LEFT + pw,
            LEFT - 5.0,
            y + 4.0,
            esc(&si(*v))
        );
    }
    // X ticks: categorical labels or numeric.
    let xtick_labels: Vec<(f64, String)> = match &p.x_ticks {
        Some(t) => t.iter().filter_map(|(v, l)| p.x_scale.map(*v).map(|m| (m, l.clone()))).collect(),
        None => {
            xticks.retain(|(_, m)| *m >= x0 - 1e-9 && *m <= x1 + 1e-9);
            let nines = p.x_scale == Scale::Nines;
            xticks.iter().map(|(v, m)| (*m, if nines { format!("{v}") } else { si(*v) })).collect()
        }
    };
    for (m, label) in &xtick_labels {
        let x = sx(*m);
        let _ = write!(
            s,
            r##"<line x1="{x:.1}" x2="{x:.1}" y1="{TOP}" y2="{:.1}" stroke="#eeeeee"/><text x="{x:.1}" y="{:.1}" class="tk" text-anchor="middle">{}</text>"##,
            TOP + ph,
            TOP + ph + 15.0,
            esc(label)
        );
    }
    // Frame and axis labels.
    let _ = write!(
        s,
        r##"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#555"/><text x="{:.1}" y="{:.1}" class="al" text-anchor="middle">{}</text><text transform="translate(14 {:.1}) rotate(-90)" class="al" text-anchor="middle">{}</text>"##,
        LEFT + pw / 2.0,
        TOP + ph + 34.0,
        esc(&p.x_label),
        TOP + ph / 2.0,
        esc(&p.y_label)
    );

    if xs.is_empty() {
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{:.1}" class="al" text-anchor="middle">no data</text>"#,
            LEFT + pw / 2.0,
            TOP + ph / 2.0
        );
    }
    for (i, series) in p.series.iter().enumerate() {
        let colour = series.colour.unwrap_or(PALETTE[i % PALETTE.len()]);
        let pts: Vec<(f64, f64)> =
            series.points.iter().filter_map(|(x, y)| Some((sx(p.x_scale.map(*x)?), sy(p.y_scale.map(*y)?)))).collect();
        if pts.len() > 1 {
            let d: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
            let dash = if series.dashed { r#" stroke-dasharray="6 4""# } else { "" };
            let _ = write!(
                s,
                r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="1.8"{dash}/>"#,
                d.join(" ")
            );
        }
        if pts.len() <= 40 {
            for (x, y) in &pts {
                let _ = write!(s, r#"<circle cx="{x:.1}" cy="{y:.1}" r="2.8" fill="{colour}"/>"#);
            }
        }
        let (lx, ly) = (LEFT + (i % 3) as f64 * (pw / 3.0), h + 4.0 + (i / 3) as f64 * 16.0);
        let dash = if series.dashed { r#" stroke-dasharray="4 3""# } else { "" };
        let _ = write!(
            s,
            r#"<line x1="{lx:.1}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="{colour}" stroke-width="2.5"{dash}/><text x="{:.1}" y="{:.1}" class="lg">{}</text>"#,
            lx + 18.0,
            ly + 6.0,
            ly + 6.0,
            lx + 22.0,
            ly + 10.0,
            esc(&truncate(&series.label, 34))
        );
    }
    s.push_str("</svg>");
    s
}

/// Horizontal stacked bars: one bar per row (a label, then one value per segment),
/// segments left to right in [`StackedBars::segments`] order, a linear x axis from 0,
/// the bar's total at its end and a legend. Non-finite and negative values draw nothing.
#[derive(Clone, Debug)]
pub struct StackedBars {
    pub title: String,
    pub x_label: String,
    /// Segment names and colours.
    pub segments: Vec<(String, &'static str)>,
    /// Label and values (one per segment) of each bar, top to bottom.
    pub bars: Vec<(String, Vec<f64>)>,
    pub width: f64,
}

impl StackedBars {
    pub fn new(title: impl Into<String>, x_label: impl Into<String>, segments: Vec<(String, &'static str)>) -> Self {
        StackedBars { title: title.into(), x_label: x_label.into(), segments, bars: Vec::new(), width: 760.0 }
    }

    pub fn render(&self) -> String {
        const LABEL_W: f64 = 240.0;
        const BAR_H: f64 = 14.0;
        const ROW_H: f64 = 20.0;
        let value = |v: f64| if v.is_finite() && v > 0.0 { v } else { 0.0 };
        let totals: Vec<f64> = self.bars.iter().map(|(_, vs)| vs.iter().map(|v| value(*v)).sum()).collect();
        let (_, hi, ticks) = axis(Scale::Linear, &totals, true);
        let (w, pw) = (self.width, self.width - LABEL_W - 56.0);
        let ph = ROW_H * self.bars.len().max(1) as f64;
        let total_h = TOP + ph + 38.0 + 22.0;
        let sx = |v: f64| LABEL_W + v / hi.max(1e-12) * pw;
        let mut s = String::new();
        let _ = write!(
            s,
            r##"<svg class="plot" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{total_h}" viewBox="0 0 {w} {total_h}" role="img" aria-label="{t}"><title>{t}</title><rect x="0" y="0" width="{w}" height="{total_h}" fill="#fff"/><text x="{}" y="18" class="pt" text-anchor="middle">{t}</text>"##,
            w / 2.0,
            t = esc(&self.title)
        );
        for (v, _) in ticks.iter().filter(|(v, _)| *v <= hi + 1e-9) {
            let x = sx(*v);
            let _ = write!(
                s,
                r##"<line x1="{x:.1}" x2="{x:.1}" y1="{TOP}" y2="{:.1}" stroke="#e3e3e3"/><text x="{x:.1}" y="{:.1}" class="tk" text-anchor="middle">{}</text>"##,
                TOP + ph,
                TOP + ph + 14.0,
                esc(&si(*v))
            );
        }
        let _ = write!(
            s,
            r##"<line x1="{LABEL_W}" x2="{LABEL_W}" y1="{TOP}" y2="{:.1}" stroke="#555"/><text x="{:.1}" y="{:.1}" class="al" text-anchor="middle">{}</text>"##,
            TOP + ph,
            LABEL_W + pw / 2.0,
            TOP + ph + 32.0,
            esc(&self.x_label)
        );
        for (row, ((label, values), total)) in self.bars.iter().zip(&totals).enumerate() {
            let y = TOP + row as f64 * ROW_H + (ROW_H - BAR_H) / 2.0;
            let _ = write!(
                s,
                r#"<text x="{:.1}" y="{:.1}" class="tk" text-anchor="end">{}</text>"#,
                LABEL_W - 6.0,
                y + BAR_H - 3.0,
                esc(&truncate(label, 40))
            );
            let mut x = 0.0;
            for (v, (name, colour)) in values.iter().zip(&self.segments) {
                let v = value(*v);
                if v > 0.0 {
                    let _ = write!(
                        s,
                        r#"<rect x="{:.1}" y="{y:.1}" width="{:.1}" height="{BAR_H}" fill="{colour}"><title>{}: {}</title></rect>"#,
                        sx(x),
                        (sx(x + v) - sx(x)).max(0.5),
                        esc(label),
                        esc(&format!("{name} {}", si(v)))
                    );
                }
                x += v;
            }
            let _ = write!(
                s,
                r#"<text x="{:.1}" y="{:.1}" class="tk">{}</text>"#,
                sx(*total) + 4.0,
                y + BAR_H - 3.0,
                esc(&si(*total))
            );
        }
        for (i, (name, colour)) in self.segments.iter().enumerate() {
            let (lx, ly) = (LABEL_W + i as f64 * 110.0, total_h - 16.0);
            let _ = write!(
                s,
                r#"<rect x="{lx:.1}" y="{ly:.1}" width="14" height="10" fill="{colour}"/><text x="{:.1}" y="{:.1}" class="lg">{}</text>"#,
                lx + 18.0,
                ly + 9.0,
                esc(name)
            );
        }
        s.push_str("</svg>");
        s
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes() {
        assert_eq!(esc(r#"<a href="x">&'"#), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
    }

    #[test]
    fn si_format() {
        assert_eq!(si(412_000.0), "412k");
        assert_eq!(si(1_500_000.0), "1.5M");
        assert_eq!(si(12.5), "12.5");
        assert_eq!(si(0.0), "0");
        assert_eq!(si(2500.0), "2500");
    }

    #[test]
    fn nines_scale() {
        assert!((Scale::Nines.map(99.0).unwrap() - 2.0).abs() < 1e-9);
        assert!((Scale::Nines.map(99.99).unwrap() - 4.0).abs() < 1e-6);
        assert_eq!(Scale::Log10.map(0.0), None);
    }

    #[test]
    fn stacked_bars_stack_and_escape() {
        let segments = vec![("a".to_string(), "#111111"), ("b<".to_string(), "#222222")];
        let mut bars = StackedBars::new("split", "µs", segments);
        assert!(bars.render().ends_with("</svg>"), "no bars");
        bars.bars.push(("<run>".into(), vec![3.0, 1.0]));
        bars.bars.push(("zero".into(), vec![0.0, f64::NAN]));
        let svg = bars.render();
        assert_eq!(svg.matches("</title></rect>").count(), 2, "the first bar's two segments only");
        assert_eq!(svg.matches(r#"width="14" height="10""#).count(), 2, "two legend keys");
        assert!(svg.contains("&lt;run&gt;: b&lt; 1</title>") && !svg.contains("<run>"));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }

    #[test]
    fn renders_degenerate_plots() {
        let mut p = Plot::new("t", "x", "y");
        assert!(p.render().contains("no data"));
        p.series.push(Series::new("one", vec![(1.0, 1.0)]));
        p.series.push(Series::new("nan", vec![(f64::NAN, 2.0), (1.0, f64::INFINITY)]));
        p.y_scale = Scale::Log10;
        let svg = p.render();
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }
}
