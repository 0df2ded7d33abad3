//! `overture serve`: the HTTP API, the tenant boundary of the embedded engine.
//!
//! The application (routes, authentication, errors, ports) is `overture_api`'s, shared with the
//! `api` Lambda of the serverless form; this module gives it its ports on the embedded engine.
//!
//! - `mod.rs`: [`run`], which opens the data directory, resumes unfinished deployments, binds
//!   and serves until SIGTERM or Ctrl-C, then stops gracefully ([`run`] says how).
//! - [`embedded`]: the ports on the embedded engine.
//! - [`events`]: the trigger file given with `--triggers`, for `POST /v1/events`.
//! - [`doors`]: the accept loop, with its caps on connections and its timeouts.

mod doors;
mod embedded;
mod events;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use overture_api::{routes, Api, DeliverEvents};
use overture_domain::egress::LoopbackEgress;

use crate::Failure;

/// `overture serve`'s options.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The address to listen on; use a loopback address unless a proxy in front terminates TLS.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub addr: SocketAddr,
    /// The cloud's identity (Keystone v3) URL that checks the callers' tokens.
    #[arg(long, env = "OS_AUTH_URL", value_name = "URL")]
    pub auth_url: String,
    /// How many steps may run at once, across every deployment it drives (they share one
    /// drive).
    #[arg(long, default_value_t = 64)]
    pub parallelism: usize,
    /// A trigger file: `POST /v1/events` evaluates it, deploying into the caller's tenant only.
    #[arg(long, value_name = "FILE")]
    pub triggers: Option<std::path::PathBuf>,
    /// Caps on connections and the time they may take.
    #[command(flatten)]
    pub doors: doors::DoorArgs,
    /// Let steps reach the ports of this host's 127.0.0.1 that their blueprints declare under
    /// `egress:`. Without it no tenant's step reaches the host's loopback (but for the cloud's
    /// own endpoints), whatever its blueprint says.
    #[arg(long)]
    pub allow_loopback_egress: bool,
}

/// `overture serve`: resumes what was unfinished, then serves until SIGTERM or Ctrl-C. Then it
/// stops gracefully and exits 0: the port is closed at once, the requests in flight are
/// answered, the steps running finish and are recorded, and no other step starts; unfinished
/// deployments are left as `overture resume` (or the next `serve`) carries them on. A second
/// signal leaves at once (exit 130), as a crash would leave them.
pub async fn run(data_dir: &Path, args: ServeArgs) -> Result<(), Failure> {
    // First, so the engine has the raised descriptor limit too and a bad cap starts nothing.
    let limits = args.doors.check()?;
    // Checked before anything starts: a bad trigger file is bad input, as for `trigger send`.
    let trigger_file = match &args.triggers {
        Some(path) => Some((crate::triggers::read_trigger_file(path)?, path)),
        None => None,
    };
    let loopback = match args.allow_loopback_egress {
        true => LoopbackEgress::Declared,
        false => LoopbackEgress::Refused,
    };
    let engine = Arc::new(embedded::Embedded::start(data_dir, args.parallelism, loopback).await?);
    let triggers = match trigger_file {
        Some((file, path)) => {
            let dispatcher = Arc::new(
                crate::triggers::Dispatcher::new(
                    Arc::clone(&engine.engine),
                    data_dir,
                    file,
                    path,
                    args.parallelism,
                )
                .await?,
            );
            events::carry_on_chains(&dispatcher, &engine.engine, &engine.resumed);
            Some(Arc::new(events::TriggerFile(dispatcher)) as Arc<dyn DeliverEvents>)
        }
        None => None,
    };
    let api = Api {
        triggers,
        queries: Arc::new(embedded::FreshQueries(Arc::clone(&engine.engine))),
        identity: Arc::new(overture_openstack::Keystone::new(args.auth_url)),
        deployments: Arc::clone(&engine) as Arc<dyn overture_api::RunDeployments>,
    };
    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .map_err(|e| Failure::BadInput(format!("--addr {}: cannot listen: {e}", args.addr)))?;
    let bound = listener.local_addr().context("reading the bound address")?;
    // Tests and scripts read the port from this line when they asked for port 0.
    outln!("listening on http://{bound}");
    let mut signals = Signals::listen()?;
    let name = signals.next();
    doors::serve(listener, routes::router(api), limits, async {
        let name = name.await;
        eprintln!(
            "{name}: stopping; the steps running finish, no other starts, and `overture resume` \
             carries the deployments on (again to leave at once)"
        );
    })
    .await;
    tokio::select! {
        () = engine.stop() => {}
        name = signals.next() => {
            eprintln!("{name} again: leaving at once; `overture resume` carries the deployments on");
            std::process::exit(crate::commands::cancel::LEFT_AT_ONCE);
        }
    }
    eprintln!("stopped");
    Ok(())
}

/// SIGTERM and Ctrl-C, which stop the server.
struct Signals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl Signals {
    /// Listens from now on: a signal that comes while the server starts is not lost.
    fn listen() -> Result<Self, Failure> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Self {
            terminate: signal(SignalKind::terminate()).context("listening for SIGTERM")?,
            interrupt: signal(SignalKind::interrupt()).context("listening for Ctrl-C")?,
        })
    }

    /// The next signal's name.
    fn next(&mut self) -> impl std::future::Future<Output = &'static str> + '_ {
        async {
            tokio::select! {
                _ = self.terminate.recv() => "SIGTERM",
                _ = self.interrupt.recv() => "Ctrl-C",
            }
        }
    }
}
