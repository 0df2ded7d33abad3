//! `overture-local-aws`: `stack` makes the stack in the local emulator and prints the settings
//! to export; `poll` delivers the stack's streams and queues to the functions served by
//! `cargo lambda watch`. `scripts/local-aws.sh` runs both.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use overture_local_aws::poller::{Invoker, Poller};
use overture_local_aws::{setup, triggers, LocalError};

#[derive(Parser)]
#[command(
    about = "Overture's AWS form on one machine: the stack in the emulator, and Lambda's triggers"
)]
struct Cli {
    /// The local AWS emulator.
    #[arg(
        long,
        env = "AWS_ENDPOINT_URL",
        default_value = "http://127.0.0.1:4566"
    )]
    endpoint: String,
    /// The region the stack is made in.
    #[arg(long, env = "AWS_REGION", default_value = "eu-west-1")]
    region: String,
    /// The stack's name; its functions are named STACK-FUNCTION.
    #[arg(long, default_value = "overture-local")]
    stack: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Makes the stack (unless it is there) and prints, as shell exports, what points the
    /// functions and the `overture` program at it.
    Stack {
        /// Where `cargo lambda watch` serves the submit function (OVERTURE_SUBMIT_URL).
        #[arg(long)]
        submit_url: Option<String>,
        /// The cloud's identity service (Keystone v3) that checks callers' tokens: the stack's
        /// `AuthUrl`. Without it the api function does not start, and the submit function
        /// refuses requests that bring a token.
        #[arg(long)]
        auth_url: Option<String>,
    },
    /// Prints the template's functions, one a line: the binaries `cargo lambda watch` serves.
    Functions,
    /// Keeps the door of the function URLs with AWS_IAM auth (the submit function's) in front
    /// of `cargo lambda watch`, which checks no auth: a request must be signed (SigV4) with the
    /// local credentials, and the function is handed the signer, as Lambda does.
    Urls {
        /// The Lambda invoke API of `cargo lambda watch`.
        #[arg(long, default_value = "http://127.0.0.1:9001")]
        invoke: String,
        /// Where the door listens: an address of 127.0.0.1 (port 0: a free one).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: std::net::SocketAddr,
        /// A function behind the door (repeatable).
        #[arg(long = "function", default_value = "submit")]
        functions: Vec<String>,
        /// Written with the door's address (HOST:PORT) once it listens.
        #[arg(long)]
        address_file: Option<PathBuf>,
    },
    /// Delivers the stack's streams and queues to its functions, as Lambda's triggers do.
    Poll {
        /// The Lambda invoke API of `cargo lambda watch`.
        #[arg(long, default_value = "http://127.0.0.1:9001")]
        invoke: String,
        /// Only these functions' triggers (comma-separated); all when not given.
        #[arg(long, value_delimiter = ',')]
        only: Option<Vec<String>>,
        /// Batches handed out at once from one queue.
        #[arg(long, default_value_t = 5)]
        queue_pollers: usize,
        /// Seconds an invocation may take; the first builds the function.
        #[arg(long, default_value_t = 1800)]
        invoke_timeout: u64,
        /// Where each function's position in the stream is kept, so a poller started again goes
        /// on where it stopped; in memory only when not given.
        #[arg(long)]
        checkpoints: Option<PathBuf>,
        /// Where to keep the number of invocations of each function (JSON), for the cost
        /// figures.
        #[arg(long)]
        invocations_file: Option<PathBuf>,
        /// Written once the triggers are read and their delivery has started.
        #[arg(long)]
        ready_file: Option<PathBuf>,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("OVERTURE_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        // Its log is a file under `make local-aws`: colours only on a terminal.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match run(Cli::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("overture-local-aws: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), LocalError> {
    if let Command::Functions = cli.command {
        for function in overture_aws::stack::functions() {
            println!("{function}");
        }
        return Ok(());
    }
    if let Command::Urls {
        invoke,
        listen,
        functions,
        address_file,
    } = cli.command
    {
        return urls(invoke, listen, functions, address_file, cli.region).await;
    }
    let config = overture_aws::config::for_endpoint(&cli.endpoint, &cli.region).await;
    match cli.command {
        Command::Functions | Command::Urls { .. } => Ok(()),
        Command::Stack {
            submit_url,
            auth_url,
        } => {
            let parameters: Vec<(&str, &str)> = auth_url
                .iter()
                .map(|url| ("AuthUrl", url.as_str()))
                .collect();
            let outputs = setup::stack(&config, &cli.stack, &parameters).await?;
            let mut settings = setup::settings(&config, &cli.stack, &outputs).await?;
            for (name, value) in [
                ("AWS_ENDPOINT_URL", cli.endpoint.as_str()),
                ("AWS_REGION", cli.region.as_str()),
                // The emulator checks no credentials; these keep the SDK from looking for any.
                // They also sign the requests to the submit URL, which the door checks.
                ("AWS_ACCESS_KEY_ID", setup::LOCAL_ACCESS_KEY),
                ("AWS_SECRET_ACCESS_KEY", setup::LOCAL_SECRET_KEY),
                ("AWS_EC2_METADATA_DISABLED", "true"),
                ("OVERTURE_BACKEND", "aws"),
            ] {
                settings.insert(name.to_owned(), value.to_owned());
            }
            if let Some(url) = submit_url {
                settings.insert("OVERTURE_SUBMIT_URL".to_owned(), url);
            }
            print!("{}", setup::exports(&settings));
            Ok(())
        }
        Command::Poll {
            invoke,
            only,
            queue_pollers,
            invoke_timeout,
            checkpoints,
            invocations_file,
            ready_file,
        } => {
            if let Some(dir) = &checkpoints {
                std::fs::create_dir_all(dir)
                    .map_err(|e| LocalError::call("making the checkpoints' directory", e))?;
            }
            let lambda = aws_sdk_lambda::Client::new(&config);
            let sqs = aws_sdk_sqs::Client::new(&config);
            let found = triggers::read(&lambda, &sqs, &cli.stack, only.as_deref()).await?;
            if found.is_empty() {
                return Err(LocalError::NoTriggers(cli.stack));
            }
            for trigger in &found {
                tracing::info!(function = trigger.function, source = ?trigger.source, batch = trigger.batch_size, "delivering");
            }
            let poller = Poller {
                streams: aws_sdk_dynamodbstreams::Client::new(&config),
                sqs,
                invoker: match invocations_file {
                    Some(file) => Invoker::new(&invoke, Duration::from_secs(invoke_timeout))?
                        .counting_to(file),
                    None => Invoker::new(&invoke, Duration::from_secs(invoke_timeout))?,
                },
                queue_pollers,
                checkpoints,
            };
            let delivering = tokio::spawn(async move { poller.run(found).await });
            if let Some(ready) = ready_file {
                std::fs::write(&ready, "polling\n")
                    .map_err(|e| LocalError::call("writing the ready file", e))?;
            }
            delivering
                .await
                .map_err(|e| LocalError::call("the poller", e))?
        }
    }
}

/// Serves the door of the AWS_IAM function URLs until the process ends.
async fn urls(
    invoke: String,
    listen: std::net::SocketAddr,
    functions: Vec<String>,
    address_file: Option<PathBuf>,
    region: String,
) -> Result<(), LocalError> {
    if !listen.ip().is_loopback() {
        return Err(LocalError::call(
            "--listen",
            format!("{listen}: the door listens on 127.0.0.1 only"),
        ));
    }
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| LocalError::call("binding the door's address", e))?;
    let address = listener
        .local_addr()
        .map_err(|e| LocalError::call("reading the door's address", e))?;
    let door = overture_local_aws::urls::Door {
        invoke,
        functions,
        region,
        account: setup::LOCAL_ACCOUNT.to_owned(),
        known: vec![(setup::local_credentials(), setup::local_caller_arn())],
        timeout: Duration::from_secs(600),
    };
    tracing::info!(%address, "the AWS_IAM function URLs' door listens");
    if let Some(file) = address_file {
        std::fs::write(&file, format!("{address}\n"))
            .map_err(|e| LocalError::call("writing the address file", e))?;
    }
    overture_local_aws::urls::serve(door, listener).await
}
