//! The built-in controllers a `--controllers` list selects, as `flotilla worker` selects them, for the
//! commands that describe a fleet without running it (`rbac`, `kcm-flags`).

use flotilla_controllers::{Builtin, builtins};
use flotilla_worker::select_controllers;

/// The built-ins `entries` (`*`, `name`, `-name`) select, in registry order.
///
/// # Errors
/// An unknown controller name, or a selection of no controller.
pub fn selected_builtins(entries: &[String]) -> anyhow::Result<Vec<&'static Builtin>> {
    let names: Vec<&str> = builtins().iter().map(|b| b.name).collect();
    let chosen = select_controllers(entries, &names)?;
    if chosen.is_empty() {
        anyhow::bail!("--controllers selects no controller");
    }
    Ok(builtins()
        .iter()
        .filter(|b| chosen.contains(&b.name))
        .collect())
}
