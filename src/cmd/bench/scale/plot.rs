//! The plot of `bench scale`: the leader's resident memory over its cold start and the forced relist,
//! with the moments that matter marked.

use std::path::Path;

use plotters::prelude::*;

/// Draws `timeline` (`(s, MiB)`) with a vertical line and a label at each of `marks` into an SVG at
/// `path`.
///
/// # Errors
/// When the file cannot be written.
pub(super) fn draw(
    path: &Path,
    timeline: &[(f64, f64)],
    marks: &[(f64, String)],
) -> anyhow::Result<()> {
    if let Some(parent) = path.parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent)?;
    }
    let end = timeline.last().map_or(1.0, |(t, _)| *t).max(1.0);
    let top = timeline.iter().map(|(_, m)| *m).fold(1.0, f64::max);
    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_error)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("flotilla bench scale: leader memory", ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..end * 1.02, 0.0..top * 1.15)
        .map_err(plot_error)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("RSS, MiB")
        .draw()
        .map_err(plot_error)?;
    chart
        .draw_series(LineSeries::new(
            timeline.iter().copied(),
            BLUE.stroke_width(2),
        ))
        .map_err(plot_error)?;
    for (t, what) in marks {
        chart
            .draw_series(LineSeries::new(
                [(*t, 0.0), (*t, top * 1.1)],
                BLACK.mix(0.3),
            ))
            .map_err(plot_error)?;
        chart
            .draw_series([Text::new(what.clone(), (*t, top * 1.1), ("sans-serif", 14))])
            .map_err(plot_error)?;
    }
    root.present().map_err(plot_error)?;
    Ok(())
}

fn plot_error(err: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("cannot draw the plot: {err}")
}
