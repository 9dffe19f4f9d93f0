//! The `--matrix` chart: a grouped SVG bar chart of the p50 latencies (uncontended cycle,
//! contended handoff) per configuration and implementation.

use std::fmt::Write as _;

use super::options::{Mode, CONFIGS, IMPLS};
use super::report::{find, Report};

/// Each implementation's bar colour, in legend order.
const COLORS: [(&str, &str); 4] = [
    ("raw", "#999999"),
    ("zkfence", "#2b7bb9"),
    ("zkclient", "#e07b39"),
    ("curator", "#6a9f3a"),
];

/// One bar: its group's label, the implementation, the p50 in µs.
type Bar = (String, &'static str, f64);

/// The chart's geometry, in SVG user units.
#[derive(Debug, Clone, Copy)]
struct Frame {
    width: f64,
    height: f64,
    left: f64,
    bottom: f64,
    plot_h: f64,
    group_w: f64,
    bar_w: f64,
}

impl Frame {
    fn new() -> Self {
        let (width, height, left, bottom) = (760.0, 370.0, 40.0, 60.0);
        let group_w = (width - left - 20.0) / CONFIGS.len() as f64;
        Frame {
            width,
            height,
            left,
            bottom,
            plot_h: height - bottom - 55.0,
            group_w,
            bar_w: group_w / (IMPLS.len() + 1) as f64,
        }
    }
}

/// A grouped bar chart (SVG) of cycle and handoff p50 per configuration and impl.
pub(super) fn chart(reports: &[Report]) -> String {
    let bars = bars(reports);
    let max = bars.iter().map(|b| b.2).fold(1.0, f64::max);
    let frame = Frame::new();
    let mut svg = header(&frame);
    for (i, bar) in bars.iter().enumerate() {
        draw_bar(&mut svg, &frame, i, bar, max);
    }
    draw_legend_and_axis(&mut svg, &frame);
    svg.push_str("</svg>\n");
    svg
}

/// The bars, grouped by configuration: the uncontended cycle, then each contended handoff.
fn bars(reports: &[Report]) -> Vec<Bar> {
    let mut bars = Vec::new();
    for (mode, contenders) in CONFIGS {
        let label = if mode == Mode::Contended {
            format!("handoff N={contenders}")
        } else {
            "uncontended cycle".to_owned()
        };
        for implementation in IMPLS {
            if let Some(r) = find(reports, implementation, mode, contenders) {
                let value = if mode == Mode::Contended {
                    r.handoff_p50_us.unwrap_or(0.0)
                } else {
                    r.cycle_p50_us
                };
                bars.push((label.clone(), implementation.name(), value));
            }
        }
    }
    bars
}

/// The opening tag, the background and the titles.
fn header(frame: &Frame) -> String {
    let Frame {
        width,
        height,
        left,
        ..
    } = *frame;
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{left}\" y=\"16\" font-size=\"14\">p50 latency in µs, lower is better</text>\n\
         <text x=\"{left}\" y=\"32\" font-size=\"11\" fill=\"#555\">uncontended: acquire to release return (raw: create+delete); contended: release to next acquire (raw: delete to watch)</text>\n"
    )
}

/// The `i`th bar with its value above it, and under the first bar of a group the group's label.
fn draw_bar(svg: &mut String, frame: &Frame, i: usize, bar: &Bar, max: f64) {
    let (label, implementation, value) = bar;
    let Frame {
        height,
        left,
        bottom,
        plot_h,
        group_w,
        bar_w,
        ..
    } = *frame;
    let group = i / IMPLS.len();
    let k = i % IMPLS.len();
    let x = left + group as f64 * group_w + (k as f64 + 0.5) * bar_w;
    let h = value / max * plot_h;
    let y = height - bottom - h;
    let color = COLORS
        .iter()
        .find(|c| c.0 == *implementation)
        .map_or("#000", |c| c.1);
    let _ = writeln!(
        svg,
        "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{h:.1}\" fill=\"{color}\"/>",
        bar_w * 0.9
    );
    let _ = writeln!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"10\">{value:.0}</text>",
        x + bar_w * 0.45,
        y - 3.0
    );
    if k == 0 {
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{label}</text>",
            left + group as f64 * group_w + group_w / 2.0,
            height - bottom + 18.0
        );
    }
}

/// The colour legend along the bottom edge, and the x axis.
fn draw_legend_and_axis(svg: &mut String, frame: &Frame) {
    let Frame {
        width,
        height,
        left,
        bottom,
        ..
    } = *frame;
    for (i, (name, color)) in COLORS.iter().enumerate() {
        let x = left + i as f64 * 110.0;
        let _ = writeln!(svg, "<rect x=\"{x}\" y=\"{:.1}\" width=\"12\" height=\"12\" fill=\"{color}\"/><text x=\"{:.1}\" y=\"{:.1}\">{name}</text>", height - 24.0, x + 16.0, height - 14.0);
    }
    let _ = writeln!(
        svg,
        "<line x1=\"{left}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"black\"/>",
        height - bottom,
        width - 20.0,
        height - bottom
    );
}
