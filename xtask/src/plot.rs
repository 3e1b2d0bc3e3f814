//! PNG plots for report figures: line panels (accuracy and test loss against rounds, several curves per panel,
//! each with an optional band such as mean ± standard deviation over seeds, either axis linear or base-10
//! logarithmic), scatter panels (markers, with grey guide lines such as a diagonal) and bar panels (one bar
//! per category, e.g. how often each client took part).
//!
//! Drawn with `plotters`' bitmap backend and an embedded font (Ubuntu Light from `epaint_default_fonts`)
//! rendered through `ab_glyph`, so figures come out the same on a bare CI machine with no fonts, fontconfig
//! or freetype installed. A point that cannot be placed (a non-finite value, or a value ≤ 0 on a log axis)
//! breaks its curve instead of breaking the plot; a panel with no point to place is drawn empty, on a 1 to 10
//! decade where an axis is logarithmic.

use std::ops::Range;
use std::path::Path;
use std::sync::OnceLock;

use anyhow::{Context, Result, anyhow, ensure};
use plotters::coord::Shift;
use plotters::coord::combinators::BindKeyPoints;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// One curve: its legend label and its `(x, y)` points in drawing order.
///
/// Build it with the fields that matter and `..Series::default()` for the rest: a line, no band.
#[derive(Default, Clone)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    pub style: SeriesStyle,
    /// A shaded band behind the line: `(x, low, high)` in drawing order (e.g. mean ± std over seeds).
    pub band: Vec<(f64, f64, f64)>,
}

/// How a series is drawn.
#[derive(Default, Clone, Copy, PartialEq, Eq, Debug)]
pub enum SeriesStyle {
    /// A line in the next colour of the palette.
    #[default]
    Line,
    /// Filled circles in the next colour of the palette, not joined.
    Markers,
    /// A line with a filled circle at each point: a sweep, whose points are the settings run.
    LineMarkers,
    /// A thin grey dashed line, for a reference such as y = x: it takes no colour of the palette.
    Guide,
}

/// One chart with its own axes: curves with a legend, or, when `bars` is set, a bar chart.
///
/// Build it with the fields that matter and `..Panel::default()` for the rest: linear axes, no bars.
#[derive(Default)]
pub struct Panel {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    /// A base-10 logarithmic x axis; points with x ≤ 0 are left out and break their curve.
    pub x_log: bool,
    /// A base-10 logarithmic y axis; points with y ≤ 0 are left out and break their curve.
    pub y_log: bool,
    /// A bar chart instead of curves: one bar per `(label, value)`, in this order, labelled along the x axis
    /// and with its value above it. Such a panel has no `series` and linear axes (bars start at zero); a
    /// non-finite value leaves its slot empty.
    pub bars: Option<Vec<(String, f64)>>,
    /// The x axis' range instead of the data's; points outside it are left out.
    pub x_range: Option<(f64, f64)>,
    /// The y axis' range instead of the data's (a zoom on the region where curves differ); points
    /// outside it are left out and break their curve.
    pub y_range: Option<(f64, f64)>,
}

impl Panel {
    /// Whether a point can be drawn on this panel's axes: finite, and positive on a log axis.
    fn places(&self, (x, y): (f64, f64)) -> bool {
        let fits = |v: f64, log: bool| v.is_finite() && (!log || v > 0.0);
        let inside = |v: f64, range: Option<(f64, f64)>| range.is_none_or(|(lo, hi)| (lo..=hi).contains(&v));
        fits(x, self.x_log) && fits(y, self.y_log) && inside(x, self.x_range) && inside(y, self.y_range)
    }
}

const PANEL_SIZE: (u32, u32) = (800, 500);
/// `plotters` looks fonts up by family name; registering under the default family makes every text use it.
const FONT: &str = "sans-serif";
/// Tableau 20: Tableau 10's distinct hues, which stay apart in print and for the common colour-vision
/// deficiencies, then their light companions, so that up to 20 curves of a panel differ.
const PALETTE: [RGBColor; 20] = [
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
    RGBColor(174, 199, 232),
    RGBColor(255, 187, 120),
    RGBColor(152, 223, 138),
    RGBColor(255, 152, 150),
    RGBColor(197, 176, 213),
    RGBColor(196, 156, 148),
    RGBColor(247, 182, 210),
    RGBColor(199, 199, 199),
    RGBColor(219, 219, 141),
    RGBColor(158, 218, 229),
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
    match &panel.bars {
        Some(bars) => draw_bars(area, panel, bars),
        None => draw_lines(area, panel),
    }
}

/// The chart frame every panel shares: caption, margins and label areas.
fn frame<'a, 'b>(
    area: &'a DrawingArea<BitMapBackend<'b>, Shift>,
    title: &str,
) -> ChartBuilder<'a, 'b, BitMapBackend<'b>> {
    let mut builder = ChartBuilder::on(area);
    builder.caption(title, (FONT, caption_size(area, title))).margin(16).x_label_area_size(56).y_label_area_size(64);
    builder
}

/// The caption's font size: [`CAPTION_SIZE`], smaller (down to [`MIN_CAPTION_SIZE`]) where the
/// title would otherwise run past the panel's edges and be cut.
fn caption_size(area: &DrawingArea<BitMapBackend<'_>, Shift>, title: &str) -> f64 {
    let room = f64::from(area.dim_in_pixel().0.saturating_sub(2 * 16));
    let width = |size: f64| area.estimate_text_size(title, &(FONT, size).into_text_style(area)).map_or(0, |(w, _)| w);
    let full = f64::from(width(CAPTION_SIZE));
    if full <= room { CAPTION_SIZE } else { (CAPTION_SIZE * room / full).floor().max(MIN_CAPTION_SIZE) }
}

const CAPTION_SIZE: f64 = 22.0;
const MIN_CAPTION_SIZE: f64 = 12.0;

/// Picks the coordinate types for the panel's axis scales; the drawing is the same for all four.
fn draw_lines(area: &DrawingArea<BitMapBackend<'_>, Shift>, panel: &Panel) -> Result<()> {
    let placeable: Vec<(f64, f64)> =
        panel.series.iter().flat_map(|s| &s.points).copied().filter(|&p| panel.places(p)).collect();
    let x_range = match panel.x_range {
        Some((lo, hi)) => lo..hi,
        None => axis_range_on(placeable.iter().map(|p| p.0), 0.0, panel.x_log),
    };
    // The bands are drawn whole: their edges count towards the y range.
    let band_edges = panel
        .series
        .iter()
        .flat_map(|s| &s.band)
        .flat_map(|&(x, lo, hi)| [(x, lo), (x, hi)])
        .filter(|&p| panel.places(p))
        .map(|p| p.1);
    let y_range = match panel.y_range {
        Some((lo, hi)) => lo..hi,
        None => axis_range_on(placeable.iter().map(|p| p.1).chain(band_edges), 0.05, panel.y_log),
    };
    // The legend avoids the crowded quarter as it looks on the page, that is in log units on a log axis.
    let to_axis = |v: f64, log: bool| if log { v.log10() } else { v };
    let on_page = |r: &Range<f64>, log: bool| to_axis(r.start, log)..to_axis(r.end, log);
    let page_points: Vec<(f64, f64)> =
        placeable.iter().map(|&(x, y)| (to_axis(x, panel.x_log), to_axis(y, panel.y_log))).collect();
    let legend = legend_corner(&page_points, &on_page(&x_range, panel.x_log), &on_page(&y_range, panel.y_log));
    match (panel.x_log, panel.y_log) {
        (false, false) => draw_curves(area, panel, x_range, y_range, legend),
        (true, false) => draw_curves(area, panel, x_range.log_scale(), y_range, legend),
        (false, true) => draw_curves(area, panel, x_range, y_range.log_scale(), legend),
        (true, true) => draw_curves(area, panel, x_range.log_scale(), y_range.log_scale(), legend),
    }
}

/// The mesh, the curves (broken where a point cannot be placed) and the legend, on axes of any scale.
fn draw_curves<X, Y>(
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    panel: &Panel,
    x: X,
    y: Y,
    legend: SeriesLabelPosition,
) -> Result<()>
where
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = frame(area, &panel.title).build_cartesian_2d(x, y)?;
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(&panel.x_label)
        .y_desc(&panel.y_label)
        .label_style((FONT, 16))
        .axis_desc_style((FONT, 18))
        .bold_line_style(RGBColor(220, 220, 220))
        .light_line_style(RGBColor(242, 242, 242))
        .x_labels(8)
        .x_label_formatter(&tick_label)
        .y_labels(8);
    // A log axis steps its ticks by repeated multiplication, so they carry rounding noise (0.010000000000000002)
    // that the default `Debug` formatting would print. A linear y axis keeps plotters' own labels.
    if panel.y_log {
        mesh.y_label_formatter(&tick_label);
    }
    mesh.draw()?;

    let guide = RGBColor(150, 150, 150);
    let mut colors = PALETTE.iter().cycle();
    for series in &panel.series {
        let color = if series.style == SeriesStyle::Guide { guide } else { *colors.next().expect("a cycle") };
        // Bands first, under every line: a translucent polygon between the low and high edges.
        let band: Vec<(f64, f64)> = series
            .band
            .iter()
            .map(|&(x, lo, _)| (x, lo))
            .chain(series.band.iter().rev().map(|&(x, _, hi)| (x, hi)))
            .filter(|&p| panel.places(p))
            .collect();
        if band.len() > 2 {
            chart.draw_series(std::iter::once(Polygon::new(band, color.mix(0.18).filled())))?;
        }
        match series.style {
            SeriesStyle::Markers => {
                let points: Vec<(f64, f64)> = series.points.iter().copied().filter(|&p| panel.places(p)).collect();
                let drawn = chart.draw_series(points.into_iter().map(|p| Circle::new(p, 5, color.filled())))?;
                if !series.label.is_empty() {
                    drawn.label(&series.label).legend(move |(x, y)| Circle::new((x + 12, y), 5, color.filled()));
                }
            }
            SeriesStyle::Line | SeriesStyle::LineMarkers | SeriesStyle::Guide => {
                let style =
                    if series.style == SeriesStyle::Guide { color.stroke_width(1) } else { color.stroke_width(2) };
                let mut segments = segments(&series.points, |p| panel.places(p)).into_iter();
                // The first segment (possibly empty) carries the legend entry, so a series with no placeable
                // point is still listed.
                let first = segments.next().unwrap_or_default();
                let drawn = chart.draw_series(line(first, style))?;
                // An unlabelled series (a second guide line of a band) takes no legend entry.
                if !series.label.is_empty() {
                    drawn.label(&series.label).legend(move |(x, y)| PathElement::new([(x, y), (x + 24, y)], style));
                }
                for segment in segments {
                    chart.draw_series(line(segment, style))?;
                }
                if series.style == SeriesStyle::LineMarkers {
                    let points = series.points.iter().copied().filter(|&p| panel.places(p));
                    chart.draw_series(points.map(|p| Circle::new(p, 4, color.filled())))?;
                }
            }
        }
    }

    chart
        .configure_series_labels()
        .position(legend)
        .label_font((FONT, 16))
        .background_style(WHITE)
        .border_style(RGBColor(160, 160, 160))
        .draw()?;
    Ok(())
}

/// One bar per category, each labelled with its value. Bar i spans [2i, 2i + 2] of a whole-number x axis, so
/// that its centre 2i + 1, where its tick and category label go, is a whole number too; every k-th bar gets a
/// tick when there are more than 20, so that labels do not collide.
fn draw_bars(area: &DrawingArea<BitMapBackend<'_>, Shift>, panel: &Panel, bars: &[(String, f64)]) -> Result<()> {
    ensure!(panel.series.is_empty(), "a bar panel draws no curves, but it has {} series", panel.series.len());
    ensure!(!panel.x_log, "a bar panel's x axis lists categories; it cannot be logarithmic");
    ensure!(!panel.y_log, "a bar panel needs a linear y axis: bars start at zero");
    // Zero is always in view, since the bars grow from it; the padding leaves room for the value labels, and
    // a chart with no bar above or below zero shows 0..1.
    let finite = bars.iter().map(|b| b.1).filter(|v| v.is_finite());
    let (lo, hi) = finite.fold((0.0f64, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let pad = if hi > lo { (hi - lo) * 0.08 } else { 1.0 };
    let bottom = if lo < 0.0 { lo - pad } else { 0.0 };
    let top = if hi > 0.0 || lo == 0.0 { hi + pad } else { 0.0 };
    let step = bars.len().div_ceil(20).max(1);
    let ticks: Vec<usize> = (0..bars.len()).step_by(step).map(|i| 2 * i + 1).collect();
    let x = (0..2 * bars.len().max(1)).with_key_points(ticks);
    // Names that would run into each other side by side (some 8 px a character) stand upright.
    let longest = bars.iter().map(|b| b.0.chars().count()).max().unwrap_or(0) as u32;
    let upright = bars.len() as u32 * longest * 8 > PANEL_SIZE.0 - 120;
    let mut builder = frame(area, &panel.title);
    if upright {
        builder.x_label_area_size(24 + 9 * longest);
    }
    let mut chart = builder.build_cartesian_2d(x, bottom..top)?;
    let label_style = match upright {
        true => (FONT, 15).into_font().transform(FontTransform::Rotate90),
        false => (FONT, 16).into_font(),
    };
    // plotters centres a rotated label on its tick, half of it inside the chart: as many blanks as
    // the name is wide (a blank is about half a letter) put the name below the axis.
    let named =
        |name: &str| if upright { format!("{}{name}", " ".repeat(2 * name.chars().count() + 5)) } else { name.into() };
    let category = |x: &usize| bars.get(x / 2).filter(|_| x % 2 == 1).map_or_else(String::new, |b| named(&b.0));
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc(&panel.x_label)
        .y_desc(&panel.y_label)
        .label_style((FONT, 16))
        .axis_desc_style((FONT, 18))
        .bold_line_style(RGBColor(220, 220, 220))
        .light_line_style(RGBColor(242, 242, 242))
        .x_label_formatter(&category)
        .x_label_style(label_style)
        .y_labels(8)
        .y_label_formatter(&tick_label)
        .draw()?;

    let color = PALETTE[0];
    let drawn = || bars.iter().enumerate().filter(|(_, (_, v))| v.is_finite()).map(|(i, &(_, v))| (2 * i, v));
    chart.draw_series(drawn().map(|(x, v)| {
        let mut bar = Rectangle::new([(x, 0.0), (x + 2, v)], color.filled());
        bar.set_margin(0, 0, 6, 6);
        bar
    }))?;
    chart.draw_series(drawn().map(|(x, v)| {
        // Above a bar that rises, below one that falls.
        let anchor = Pos::new(HPos::Center, if v < 0.0 { VPos::Top } else { VPos::Bottom });
        Text::new(bar_label(v), (x + 1, v), (FONT, 14).into_font().color(&BLACK).pos(anchor))
    }))?;
    Ok(())
}

/// Ticks without the default formatter's forced decimal (rounds read `10`, not `10.0`), and a tick that lands a
/// rounding error below zero reads `0`, not `-0`.
fn tick_label(x: &f64) -> String {
    let label = plotters::data::float::pretty_print_float(*x, false);
    if label == "-0" { "0".to_string() } else { label }
}

/// A bar's value as a reader wants it: one decimal from 100 up, two from 1, three below
/// (means over seeds are not printed as 373.3333333333), without trailing zeros.
fn bar_label(v: f64) -> String {
    let decimals = if v.abs() >= 100.0 {
        1
    } else if v.abs() >= 1.0 {
        2
    } else {
        3
    };
    let text = format!("{v:.decimals$}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" { "0".to_string() } else { text.to_string() }
}

/// A line through the points; a lone point would draw nothing as a line, so it gets a dot instead.
fn line<DB: DrawingBackend>(points: Vec<(f64, f64)>, style: ShapeStyle) -> LineSeries<DB, (f64, f64)> {
    let dot = if points.len() == 1 { 3 } else { 0 };
    LineSeries::new(points, style).point_size(dot)
}

/// Splits a curve into runs of points that `places` accepts, so a point off the axes leaves a gap.
fn segments(points: &[(f64, f64)], places: impl Fn((f64, f64)) -> bool) -> Vec<Vec<(f64, f64)>> {
    points.split(|&p| !places(p)).filter(|run| !run.is_empty()).map(<[_]>::to_vec).collect()
}

/// [`axis_range`] on a linear axis; on a log axis the same in decades (the padding a share of the decades
/// spanned, `1..10` when there is no value), widened to whole decades when it would hold fewer than two
/// powers of ten, since a log axis has its ticks and labels at powers of ten.
fn axis_range_on(values: impl Iterator<Item = f64>, pad: f64, log: bool) -> Range<f64> {
    if !log {
        return axis_range(values, pad);
    }
    let Range { start: mut lo, end: mut hi } = axis_range(values.filter(|&v| v > 0.0).map(f64::log10), pad);
    if hi.floor() - lo.ceil() < 1.0 {
        (lo, hi) = (lo.floor(), hi.ceil());
    }
    // plotters finds the first tick as 10^⌈ln(start) / ln(10)⌉, and ln(0.1) / ln(10) rounds to just above −1:
    // a hair of slack on each side keeps a power of ten that ends the range from losing its tick.
    const SLACK: f64 = 1e-9;
    10f64.powf(lo - SLACK)..10f64.powf(hi + SLACK)
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
    use plotters::coord::combinators::LogCoord;
    use plotters::coord::ranged1d::Ranged as _;

    use super::*;

    fn curve(label: &str, f: impl Fn(f64) -> f64) -> Series {
        Series {
            label: label.to_string(),
            points: (0..=50).map(|r| (f64::from(r), f(f64::from(r)))).collect(),
            ..Series::default()
        }
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
                ..Panel::default()
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
                ..Panel::default()
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
            series: vec![Series {
                label: "all NaN".to_string(),
                points: vec![(0.0, f64::NAN), (1.0, f64::NAN)],
                ..Series::default()
            }],
            ..Panel::default()
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
        assert_eq!(segments(&points, |p| Panel::default().places(p)), vec![vec![(0.0, 1.0)], vec![(2.0, 3.0)]]);
    }

    #[test]
    fn tick_labels_drop_forced_decimals_and_negative_zero() {
        assert_eq!(tick_label(&10.0), "10");
        assert_eq!(tick_label(&0.25), "0.25");
        assert_eq!(tick_label(&-1e-17), "0");
    }
    /// The asyncnc figures' shapes: server loss against rounds 1..1000 falling from 1.3 to 0.002 on log-log axes,
    /// with a non-positive point (round 0, and a zero loss) that each break the curve.
    fn log_log_panel() -> Panel {
        let loss = |r: f64| 0.002 + 1.3 * (-r / 40.0).exp();
        let mut server = Series {
            label: "server".into(),
            points: (0..=1000).map(|r| (f64::from(r), loss(f64::from(r)))).collect(),
            ..Series::default()
        };
        server.points[500].1 = 0.0;
        Panel {
            title: "Server loss".into(),
            x_label: "round".into(),
            y_label: "loss".into(),
            series: vec![
                server,
                Series {
                    label: "slower".into(),
                    points: (1..=1000).map(|r| (f64::from(r), loss(f64::from(r) / 3.0))).collect(),
                    ..Series::default()
                },
            ],
            x_log: true,
            y_log: true,
            ..Panel::default()
        }
    }

    fn participation_panel() -> Panel {
        let counts = [412.0, 388.0, 401.0, 95.0, 377.0, 420.0, 0.0, 399.0, 406.0, 380.0];
        Panel {
            title: "Participation".into(),
            x_label: "client".into(),
            y_label: "updates aggregated".into(),
            bars: Some(counts.iter().enumerate().map(|(i, &c)| (i.to_string(), c)).collect()),
            ..Panel::default()
        }
    }

    #[test]
    fn writes_log_log_and_bar_panels() {
        let dir = tempfile::tempdir().unwrap();
        for (name, panel) in [("log-log.png", log_log_panel()), ("bars.png", participation_panel())] {
            let path = dir.path().join(name);
            write_png(&path, &[panel]).unwrap();
            let bytes = std::fs::read(&path).unwrap();
            assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{name}");
            assert_eq!(png_size(&bytes), PANEL_SIZE, "{name}");
            // Curves or bars with text compress to over 10 kB; a blank canvas is well under.
            assert!((10_000..2_000_000).contains(&bytes.len()), "{name}: {} bytes", bytes.len());
        }
        let path = dir.path().join("side-by-side.png");
        write_png(&path, &[log_log_panel(), participation_panel()]).unwrap();
        assert_eq!(png_size(&std::fs::read(&path).unwrap()), (1600, 500));
    }

    /// A log axis with nothing positive to place draws an empty panel over one decade, as all-NaN data does on
    /// linear axes: a run that diverged or has not started still gets its figure, and its legend entry.
    #[test]
    fn a_log_axis_without_positive_values_draws_an_empty_panel() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("empty-log.png");
        let panel = Panel {
            title: "Server loss".into(),
            series: vec![Series {
                label: "zero".into(),
                points: vec![(0.0, 0.0), (1.0, -1.0), (2.0, f64::NAN)],
                ..Series::default()
            }],
            x_log: true,
            y_log: true,
            ..Panel::default()
        };
        write_png(&path, &[panel]).unwrap();
        assert_eq!(png_size(&std::fs::read(&path).unwrap()), PANEL_SIZE);
        let r = axis_range_on([0.0, -1.0].into_iter(), 0.05, true);
        assert!((r.start - 1.0).abs() < 1e-6 && (r.end - 10.0).abs() < 1e-6, "{r:?}");
    }

    #[test]
    fn log_ranges_pad_in_decades_and_hold_two_powers_of_ten() {
        let close =
            |r: Range<f64>, lo: f64, hi: f64| (r.start / lo - 1.0).abs() < 1e-6 && (r.end / hi - 1.0).abs() < 1e-6;
        // Rounds 1..1000, no padding: exactly three decades.
        assert!(close(axis_range_on([1.0, 10.0, 1000.0].into_iter(), 0.0, true), 1.0, 1000.0));
        // Losses 0.002..1.3 span 2.81 decades; 5 % of that on each side.
        let (lo, hi) = (0.002f64.log10(), 1.3f64.log10());
        let pad = (hi - lo) * 0.05;
        let r = axis_range_on([1.3, 0.0, 0.002, -4.0].into_iter(), 0.05, true);
        assert!(close(r, 10f64.powf(lo - pad), 10f64.powf(hi + pad)));
        // Within one decade, or a single value: widened to the decades around it.
        assert!(close(axis_range_on([0.3, 0.9].into_iter(), 0.05, true), 0.1, 1.0));
        assert!(close(axis_range_on([2.0].into_iter(), 0.0, true), 0.1, 10.0));
        // A linear axis is `axis_range`.
        assert_eq!(axis_range_on([0.0, 10.0].into_iter(), 0.1, false), -1.0..11.0);
        // Powers of ten that end a range keep their ticks (8 labels asked for, as `draw_curves` does).
        let ticks = |values: &[f64], pad: f64| {
            let coord: LogCoord<f64> = axis_range_on(values.iter().copied(), pad, true).log_scale().into();
            coord.key_points(8)
        };
        let near = |got: Vec<f64>, want: &[f64]| {
            got.len() == want.len() && got.iter().zip(want).all(|(g, w)| (g / w - 1.0).abs() < 1e-9)
        };
        assert!(near(ticks(&[0.3, 0.9], 0.05), &[0.1, 1.0]), "{:?}", ticks(&[0.3, 0.9], 0.05));
        assert!(near(ticks(&[1.0, 1000.0], 0.0), &[1.0, 10.0, 100.0, 1000.0]), "{:?}", ticks(&[1.0, 1000.0], 0.0));
        assert!(near(ticks(&[0.002, 1.3], 0.05), &[0.01, 0.1, 1.0]), "{:?}", ticks(&[0.002, 1.3], 0.05));
    }

    #[test]
    fn log_axes_break_curves_at_non_positive_points() {
        let panel = Panel { x_log: true, ..Panel::default() };
        let points = [(0.0, 1.0), (1.0, 2.0), (2.0, -3.0), (-1.0, 4.0), (4.0, 0.0), (5.0, f64::NAN), (6.0, 7.0)];
        assert_eq!(
            segments(&points, |p| panel.places(p)),
            vec![vec![(1.0, 2.0), (2.0, -3.0)], vec![(4.0, 0.0)], vec![(6.0, 7.0)]]
        );
        let panel = Panel { y_log: true, ..Panel::default() };
        assert_eq!(
            segments(&points, |p| panel.places(p)),
            vec![vec![(0.0, 1.0), (1.0, 2.0)], vec![(-1.0, 4.0)], vec![(6.0, 7.0)]]
        );
    }

    #[test]
    fn a_bar_panel_rejects_curves_and_log_axes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bars.png");
        let with_curve = Panel { series: vec![curve("c", |r| r)], ..participation_panel() };
        let err = write_png(&path, &[with_curve]).unwrap_err();
        assert!(
            format!("{err:#}")
                .contains("drawing panel `Participation`: a bar panel draws no curves, but it has 1 series"),
            "{err:#}"
        );
        let err = write_png(&path, &[Panel { y_log: true, ..participation_panel() }]).unwrap_err();
        assert!(format!("{err:#}").contains("a bar panel needs a linear y axis"), "{err:#}");
        let err = write_png(&path, &[Panel { x_log: true, ..participation_panel() }]).unwrap_err();
        assert!(format!("{err:#}").contains("cannot be logarithmic"), "{err:#}");
        // No bars, or only non-finite ones, draw an empty chart.
        write_png(&path, &[Panel { bars: Some(Vec::new()), ..participation_panel() }]).unwrap();
        write_png(&path, &[Panel { bars: Some(vec![("0".into(), f64::NAN)]), ..participation_panel() }]).unwrap();
        assert_eq!(png_size(&std::fs::read(&path).unwrap()), PANEL_SIZE);
    }

    #[test]
    fn writes_markers_guides_bands_and_fixed_ranges() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("scatter.png");
        let guide = |label: &str, shift: f64| Series {
            label: label.into(),
            points: vec![(0.0, shift), (100.0, 100.0 + shift)],
            style: SeriesStyle::Guide,
            ..Series::default()
        };
        let scatter = Panel {
            title: "ours against the paper".into(),
            series: vec![
                guide("ours = paper", 0.0),
                guide("", 3.0),
                Series {
                    label: "A".into(),
                    points: vec![(50.0, 52.0), (f64::NAN, 1.0), (200.0, 1.0)],
                    style: SeriesStyle::Markers,
                    ..Series::default()
                },
            ],
            x_range: Some((0.0, 100.0)),
            y_range: Some((0.0, 100.0)),
            ..Panel::default()
        };
        let banded = Panel {
            title: "mean ± std".into(),
            series: vec![Series {
                label: "B".into(),
                points: vec![(0.0, 1.0), (1.0, 2.0)],
                band: vec![(0.0, 0.5, 1.5), (1.0, 1.5, 2.5)],
                ..Series::default()
            }],
            ..Panel::default()
        };
        write_png(&path, &[scatter, banded]).unwrap();
        assert_eq!(png_size(&std::fs::read(&path).unwrap()), (2 * PANEL_SIZE.0, PANEL_SIZE.1));
    }

    #[test]
    fn a_sweep_line_marks_its_points() {
        let dir = tempfile::tempdir().unwrap();
        let drawn = |style: SeriesStyle| {
            let path = dir.path().join("sweep.png");
            let series =
                Series { label: "M = 2".into(), points: vec![(2.0, 1.0), (4.0, 3.0)], style, ..Series::default() };
            write_png(&path, &[Panel { series: vec![series], ..Panel::default() }]).unwrap();
            std::fs::read(&path).unwrap()
        };
        assert_ne!(drawn(SeriesStyle::Line), drawn(SeriesStyle::LineMarkers), "the circles are drawn");
    }

    #[test]
    fn bar_labels_round_means_and_drop_trailing_zeros() {
        assert_eq!(bar_label(373.333_333_333_3), "373.3");
        assert_eq!(bar_label(270.0), "270");
        assert_eq!(bar_label(2.189_4), "2.19");
        assert_eq!(bar_label(0.123_45), "0.123");
        assert_eq!(bar_label(-0.000_1), "0");
        assert_eq!(bar_label(12.0), "12");
    }
}
