//! PNG line plots for report figures (accuracy and test loss against rounds, several curves per panel).
//!
//! Drawn with `plotters`' bitmap backend and an embedded font (Ubuntu Light from `epaint_default_fonts`)
//! rendered through `ab_glyph`, so figures come out the same on a bare CI machine with no fonts, fontconfig
//! or freetype installed. Non-finite points break a curve instead of breaking the plot.

use std::ops::Range;
use std::path::Path;
use std::sync::OnceLock;

use anyhow::{Context, Result, anyhow, ensure};
use plotters::coord::Shift;
use plotters::prelude::*;

/// One curve: its legend label and its `(x, y)` points in drawing order.
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

/// One chart with its own axes and legend.
pub struct Panel {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
}

const PANEL_SIZE: (u32, u32) = (800, 500);
/// `plotters` looks fonts up by family name; registering under the default family makes every text use it.
const FONT: &str = "sans-serif";
/// Tableau 10: distinct hues that stay apart in print and for the common colour-vision deficiencies.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// Writes a PNG with the panels side by side (1 or 2 columns, more panels wrap into rows), a legend per panel.
///
/// `path` must end in `.png`; its parent directory is created if missing.
pub fn write_png(path: &Path, panels: &[Panel]) -> Result<()> {
    render(path, panels).with_context(|| format!("writing plot {}", path.display()))
}

fn render(path: &Path, panels: &[Panel]) -> Result<()> {
    ensure!(!panels.is_empty(), "no panels to draw");
    ensure!(path.extension().is_some_and(|e| e.eq_ignore_ascii_case("png")), "the file name must end in `.png`");
    register_font()?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    let columns = panels.len().min(2);
    let rows = panels.len().div_ceil(columns);
    let size = (PANEL_SIZE.0 * columns as u32, PANEL_SIZE.1 * rows as u32);
    let root = BitMapBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE)?;
    for (area, panel) in root.split_evenly((rows, columns)).iter().zip(panels) {
        draw_panel(area, panel).with_context(|| format!("drawing panel `{}`", panel.title))?;
    }
    root.present()?;
    Ok(())
}

/// Registers the embedded font once per process; later calls return the first outcome.
fn register_font() -> Result<()> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            plotters::style::register_font(FONT, FontStyle::Normal, epaint_default_fonts::UBUNTU_LIGHT)
                .map_err(|_| "the embedded Ubuntu Light font does not parse".to_string())
        })
        .clone()
        .map_err(|e| anyhow!(e))
}

fn draw_panel(area: &DrawingArea<BitMapBackend<'_>, Shift>, panel: &Panel) -> Result<()> {
    let finite: Vec<(f64, f64)> =
        panel.series.iter().flat_map(|s| &s.points).copied().filter(|(x, y)| x.is_finite() && y.is_finite()).collect();
    let x_range = axis_range(finite.iter().map(|p| p.0), 0.0);
    let y_range = axis_range(finite.iter().map(|p| p.1), 0.05);

    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, (FONT, 22))
        .margin(16)
        .x_label_area_size(56)
        .y_label_area_size(64)
        .build_cartesian_2d(x_range.clone(), y_range.clone())?;
    chart
        .configure_mesh()
        .x_desc(&panel.x_label)
        .y_desc(&panel.y_label)
        .label_style((FONT, 16))
        .axis_desc_style((FONT, 18))
        .bold_line_style(RGBColor(220, 220, 220))
        .light_line_style(RGBColor(242, 242, 242))
        .x_labels(8)
        .x_label_formatter(&tick_label)
        .y_labels(8)
        .draw()?;

    for (series, &color) in panel.series.iter().zip(PALETTE.iter().cycle()) {
        let style = color.stroke_width(2);
        let mut segments = segments(&series.points).into_iter();
        // The first segment (possibly empty) carries the legend entry, so a series with no finite point
        // is still listed.
        let first = segments.next().unwrap_or_default();
        chart
            .draw_series(line(first, style))?
            .label(&series.label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 24, y)], style));
        for segment in segments {
            chart.draw_series(line(segment, style))?;
        }
    }

    chart
        .configure_series_labels()
        .position(legend_corner(&finite, &x_range, &y_range))
        .label_font((FONT, 16))
        .background_style(WHITE)
        .border_style(RGBColor(160, 160, 160))
        .draw()?;
    Ok(())
}

/// Ticks without the default formatter's forced decimal (rounds read `10`, not `10.0`), and a tick that lands a
/// rounding error below zero reads `0`, not `-0`.
fn tick_label(x: &f64) -> String {
    let label = plotters::data::float::pretty_print_float(*x, false);
    if label == "-0" { "0".to_string() } else { label }
}

/// A line through the points; a lone point would draw nothing as a line, so it gets a dot instead.
fn line<DB: DrawingBackend>(points: Vec<(f64, f64)>, style: ShapeStyle) -> LineSeries<DB, (f64, f64)> {
    let dot = if points.len() == 1 { 3 } else { 0 };
    LineSeries::new(points, style).point_size(dot)
}

/// Splits a curve into runs of finite points, so a NaN or infinite value leaves a gap.
fn segments(points: &[(f64, f64)]) -> Vec<Vec<(f64, f64)>> {
    points.split(|(x, y)| !(x.is_finite() && y.is_finite())).filter(|run| !run.is_empty()).map(<[_]>::to_vec).collect()
}

/// The range spanned by finite values, widened by `pad` of its width on each side; `0..1` when there are
/// none, and a unit-wide range around a single value.
fn axis_range(values: impl Iterator<Item = f64>, pad: f64) -> Range<f64> {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if lo > hi {
        return 0.0..1.0;
    }
    if lo == hi {
        return lo - 0.5..hi + 0.5;
    }
    let pad = (hi - lo) * pad;
    lo - pad..hi + pad
}

/// The corner of the plotting area whose quarter holds the fewest points, so the legend hides the least data
/// (lower right for rising accuracy curves, upper right for falling losses).
fn legend_corner(points: &[(f64, f64)], x: &Range<f64>, y: &Range<f64>) -> SeriesLabelPosition {
    let right = |px: f64| px >= (x.start + x.end) / 2.0;
    let upper = |py: f64| py >= (y.start + y.end) / 2.0;
    let corners = [
        (SeriesLabelPosition::UpperRight, true, true),
        (SeriesLabelPosition::LowerRight, true, false),
        (SeriesLabelPosition::UpperLeft, false, true),
        (SeriesLabelPosition::LowerLeft, false, false),
    ];
    // `min_by_key` keeps the first of equal counts, so ties go to the right-hand corners.
    let (position, ..) = corners
        .into_iter()
        .min_by_key(|&(_, r, u)| points.iter().filter(|&&(px, py)| right(px) == r && upper(py) == u).count())
        .expect("four corners");
    position
}

#[cfg(test)]
mod tests {
    use super::*;

    fn curve(label: &str, f: impl Fn(f64) -> f64) -> Series {
        Series { label: label.to_string(), points: (0..=50).map(|r| (f64::from(r), f(f64::from(r)))).collect() }
    }

    fn example() -> Vec<Panel> {
        let mut with_nan = curve("FedAvg", |r| 0.95 - 0.6 * (-r / 12.0).exp());
        with_nan.points[20].1 = f64::NAN;
        with_nan.points[35].1 = f64::INFINITY;
        vec![
            Panel {
                title: "Test accuracy".to_string(),
                x_label: "Round".to_string(),
                y_label: "Accuracy".to_string(),
                series: vec![
                    with_nan,
                    curve("FedProx (μ = 0.01)", |r| 0.93 - 0.6 * (-r / 15.0).exp()),
                    curve("FedBuff", |r| 0.90 - 0.55 * (-r / 9.0).exp()),
                ],
            },
            Panel {
                title: "Test loss".to_string(),
                x_label: "Round".to_string(),
                y_label: "Cross-entropy".to_string(),
                series: vec![
                    curve("FedAvg", |r| 0.2 + 2.1 * (-r / 12.0).exp()),
                    curve("FedProx (μ = 0.01)", |r| 0.25 + 2.0 * (-r / 15.0).exp()),
                    curve("FedBuff", |r| 0.3 + 1.9 * (-r / 9.0).exp()),
                ],
            },
        ]
    }

    /// Width and height from the PNG's IHDR chunk, which follows the 8-byte signature and an 8-byte chunk header.
    fn png_size(bytes: &[u8]) -> (u32, u32) {
        let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
        (be(16), be(20))
    }

    #[test]
    fn writes_a_two_panel_png_despite_non_finite_points() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/figure.png");
        write_png(&path, &example()).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"));
        assert_eq!(png_size(&bytes), (1600, 500));
        // Six anti-aliased curves with text compress to tens of kB; a blank canvas is well under 10 kB.
        assert!((10_000..2_000_000).contains(&bytes.len()), "{} bytes", bytes.len());
    }

    #[test]
    fn embedded_font_renders_text() {
        register_font().unwrap();
        let (width, height) = (FONT, 18).into_font().box_size("Test accuracy").unwrap();
        assert!(width > 60 && height > 8, "{width}×{height}");
    }

    #[test]
    fn empty_panels_wrap_into_rows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("empty.png");
        let empty = |title: &str| Panel {
            title: title.to_string(),
            x_label: "Round".to_string(),
            y_label: "Loss".to_string(),
            series: vec![Series { label: "all NaN".to_string(), points: vec![(0.0, f64::NAN), (1.0, f64::NAN)] }],
        };
        write_png(&path, &[empty("a"), empty("b"), empty("c")]).unwrap();
        assert_eq!(png_size(&std::fs::read(&path).unwrap()), (1600, 1000));
    }

    #[test]
    fn rejects_no_panels_and_other_formats_naming_the_path() {
        let err = write_png(Path::new("/nonexistent/plot.png"), &[]).unwrap_err();
        assert!(format!("{err:#}").contains("/nonexistent/plot.png: no panels"), "{err:#}");
        let err = write_png(Path::new("plot.svg"), &example()).unwrap_err();
        assert!(format!("{err:#}").contains("must end in `.png`"), "{err:#}");
    }

    #[test]
    fn ranges_ignore_non_finite_values() {
        assert_eq!(axis_range(std::iter::empty(), 0.05), 0.0..1.0);
        assert_eq!(axis_range([2.0].into_iter(), 0.05), 1.5..2.5);
        assert_eq!(axis_range([0.0, 10.0].into_iter(), 0.1), -1.0..11.0);
        let points = [(0.0, 1.0), (1.0, f64::NAN), (2.0, 3.0), (3.0, f64::INFINITY), (4.0, f64::NAN)];
        assert_eq!(segments(&points), vec![vec![(0.0, 1.0)], vec![(2.0, 3.0)]]);
    }

    #[test]
    fn tick_labels_drop_forced_decimals_and_negative_zero() {
        assert_eq!(tick_label(&10.0), "10");
        assert_eq!(tick_label(&0.25), "0.25");
        assert_eq!(tick_label(&-1e-17), "0");
    }
}
