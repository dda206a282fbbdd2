//! `greeting-controller`: an example custom controller on the Flotilla controller SDK. For every
//! `Greeting` (group `example.flotilla.dev`) it keeps a ConfigMap `<name>-greeting` whose
//! `data.message` is the Greeting's `spec.message`, and records the generation it handled in
//! `status.observedGeneration`.

mod reconcile;
mod resource;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match flotilla_worker::run_custom(vec![reconcile::controller().into()]).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
