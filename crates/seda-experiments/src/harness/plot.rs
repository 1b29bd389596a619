//! SVG line charts with plotters: one line per series, optional log-10 axes.

use std::path::Path;

use crate::ExperimentError;
use plotters::prelude::*;

/// One line of a chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend label.
    pub name: String,
    /// (x, y) points, in x order.
    pub points: Vec<(f64, f64)>,
}

/// Axes and labels of a chart.
#[derive(Debug, Clone)]
pub struct Chart<'a> {
    /// Title above the plot.
    pub title: &'a str,
    /// X axis label.
    pub x_label: &'a str,
    /// Y axis label.
    pub y_label: &'a str,
    /// Plot x on a log-10 scale (x must be > 0).
    pub x_log: bool,
    /// Plot y on a log-10 scale (values <= 0 are left out of the line).
    pub y_log: bool,
    /// Fixed y range; otherwise 0 .. 1.1 * max (log scale: min / 1.5 .. max * 1.5).
    pub y_range: Option<(f64, f64)>,
}

const COLORS: [RGBColor; 8] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x7f, 0x7f, 0x7f),
];

/// Series longer than this are drawn as lines without point markers.
const MARKERS_UP_TO: usize = 40;

/// A tick label as a person writes the number: at most three significant digits,
/// no float noise (`0.3`, not `0.30000000000000004`; `1`, not `0.9999999999999`),
/// thousands without a fraction.
pub fn tick(v: f64) -> String {
    if !v.is_finite() {
        return String::new();
    }
    let a = v.abs();
    if a >= 1000.0 || a == 0.0 {
        return format!("{v:.0}");
    }
    let digits = (2 - a.log10().floor() as i32).max(0) as usize;
    let s = format!("{v:.digits$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    if s == "-0" { "0".into() } else { s }
}

/// Write `series` as an SVG line chart to `path`.
pub fn line_chart(
    path: &Path,
    chart: &Chart<'_>,
    series: &[Series],
) -> Result<(), ExperimentError> {
    let tx = |x: f64| if chart.x_log { x.max(1e-9).log10() } else { x };
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| tx(p.0)));
    let (mut x0, mut x1) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
        (a.min(x), b.max(x))
    });
    if !x0.is_finite() {
        (x0, x1) = (0.0, 1.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let pad = (x1 - x0) * 0.03;
    let y_log = chart.y_log;
    let ty = |y: f64| if y_log { y.log10() } else { y };
    let keep = |y: f64| y.is_finite() && (!y_log || y > 0.0);
    let (y0, y1) = match chart.y_range {
        Some((a, b)) if y_log => (a.max(1e-9).log10(), b.max(1e-9).log10()),
        Some(r) => r,
        None => {
            let ys = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
            let (lo, hi) = ys
                .filter(|&y| keep(y))
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), y| {
                    (a.min(y), b.max(y))
                });
            if y_log {
                if lo.is_finite() {
                    (
                        (lo / 1.5).log10(),
                        (hi * 1.5).log10().max((lo / 1.5).log10() + 1.0),
                    )
                } else {
                    (0.0, 1.0)
                }
            } else {
                (0.0, if hi > 0.0 { hi * 1.1 } else { 1.0 })
            }
        }
    };
    let err = |e: &dyn std::fmt::Display| {
        ExperimentError::run(format!("cannot draw {}: {e}", path.display()))
    };
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut c = ChartBuilder::on(&root)
        .caption(chart.title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(65)
        .build_cartesian_2d((x0 - pad)..(x1 + pad), y0..y1)
        .map_err(|e| err(&e))?;
    let x_log = chart.x_log;
    let fmt_x = move |v: &f64| tick(if x_log { 10f64.powf(*v) } else { *v });
    let fmt_y = move |v: &f64| tick(if y_log { 10f64.powf(*v) } else { *v });
    c.configure_mesh()
        .x_desc(chart.x_label)
        .y_desc(chart.y_label)
        .x_label_formatter(&fmt_x)
        .y_label_formatter(&fmt_y)
        .draw()
        .map_err(|e| err(&e))?;
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter(|p| keep(p.1))
            .map(|&(x, y)| (tx(x), ty(y)))
            .collect();
        c.draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(s.name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        if pts.len() <= MARKERS_UP_TO {
            c.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))
                .map_err(|e| err(&e))?;
        }
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        // Time series start low and empty (before a spike); CDFs end high on the right.
        .position(if chart.x_log {
            SeriesLabelPosition::LowerRight
        } else {
            SeriesLabelPosition::UpperLeft
        })
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn ticks_read_as_people_write_numbers() {
        use super::tick;
        assert_eq!(tick(0.30000000000000004), "0.3");
        assert_eq!(tick(0.9999999999999), "1");
        assert_eq!(tick(0.0), "0");
        assert_eq!(tick(1500.0), "1500");
        assert_eq!(tick(12.5), "12.5");
        assert_eq!(tick(0.05), "0.05");
        assert_eq!(tick(0.123456), "0.123");
        assert_eq!(tick(-2.0), "-2");
        assert_eq!(tick(250.0), "250");
    }

    use super::*;

    #[test]
    fn writes_an_svg_with_every_series() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.svg");
        let series = vec![
            Series {
                name: "alpha".into(),
                points: vec![(1.0, 1.0), (10.0, 5.0), (1000.0, 4.0)],
            },
            Series {
                name: "beta".into(),
                points: vec![(1.0, 2.0), (1000.0, 3.0)],
            },
        ];
        let chart = Chart {
            title: "t",
            x_label: "clients",
            y_label: "Mbit/s",
            x_log: true,
            y_log: false,
            y_range: None,
        };
        line_chart(&p, &chart, &series).unwrap();
        let log_y = Chart {
            y_log: true,
            ..chart.clone()
        };
        let q = dir.path().join("d.svg");
        line_chart(&q, &log_y, &series).unwrap();
        let svg = std::fs::read_to_string(&q).unwrap();
        assert!(svg.contains("alpha") && svg.contains("beta"));
        let svg = std::fs::read_to_string(&p).unwrap();
        assert!(
            svg.starts_with("<svg")
                && svg.contains("alpha")
                && svg.contains("beta")
                && svg.contains("1000")
        );
    }
}
