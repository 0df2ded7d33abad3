//! `overture-cloud DIR`: serves a cloud on the state directory `DIR` until it is shut down
//! (admin API, SIGTERM, SIGINT). The same as the hidden `overture cloud serve --dir DIR`, without
//! the rest of Overture: the crate's tests kill it to check that a clean-up after a crash works.

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(dir), None) = (args.next(), args.next()) else {
        eprintln!("usage: overture-cloud DIR (the cloud's state directory)");
        return ExitCode::from(2);
    };
    match overture_cloud::serve(overture_cloud::CloudConfig::new(dir)).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
