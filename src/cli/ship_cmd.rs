//! `retryscope ship`: tail files and publish their lines to NATS JetStream, partitioned by
//! turn id (see `retryscope::nats::ship`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Args;

use retryscope::nats::ship::{ShipConfig, ship};
use retryscope::source::file::ReadFrom;

/// Flags of `ship`.
#[derive(Debug, Args)]
pub struct ShipArgs {
    /// Files or glob patterns to tail, or `-` for stdin (shipped until it ends).
    #[arg(value_name = "PATH_OR_GLOB", required = true)]
    paths: Vec<String>,
    /// NATS server URL (JetStream enabled).
    #[arg(long, value_name = "URL")]
    nats: String,
    #[command(flatten)]
    nats_deploy: super::nats_args::NatsArgs,
    /// Directory for the offsets checkpoint (acknowledged lines are not sent again).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// This host's name in message ids and stream names [default: the host name].
    #[arg(long, value_name = "NAME")]
    source_id: Option<String>,
    /// Partitions, when this shipper creates the stream (fixed afterwards).
    #[arg(long, value_name = "N", default_value_t = 16)]
    partitions: u32,
    /// The stream's duplicate window in seconds, when this shipper creates it.
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    duplicate_window_secs: u64,
    /// Where files with no checkpoint start.
    #[arg(long, value_name = "beginning|end", default_value = "beginning")]
    read_from: ReadFrom,
    /// Longest line shipped; longer ones are skipped and counted.
    #[arg(long, value_name = "BYTES", default_value_t = 1024 * 1024)]
    max_line_bytes: usize,
    /// When the checkpoint in --data-dir is unusable (corrupt, empty, truncated), move it
    /// aside and ship every file from the start; without this flag `ship` refuses to start.
    #[arg(long)]
    reset_checkpoint: bool,
}

pub fn run(args: ShipArgs) -> anyhow::Result<ExitCode> {
    let stdin = args.paths.iter().any(|p| p == "-");
    if stdin && args.paths.len() > 1 {
        anyhow::bail!("ship reads either files or stdin (`-`), not both");
    }
    let cfg = ShipConfig {
        nats: args.nats_deploy.deploy(&args.nats)?,
        stdin,
        include: if stdin { Vec::new() } else { args.paths },
        read_from: args.read_from,
        data_dir: args.data_dir,
        source_id: args
            .source_id
            .unwrap_or_else(|| super::common::host_name("host")),
        partitions: args.partitions.max(1),
        duplicate_window: Duration::from_secs(args.duplicate_window_secs),
        poll_interval: Duration::from_millis(100),
        max_line_bytes: args.max_line_bytes,
        reset_checkpoint: args.reset_checkpoint,
    };
    let runtime = super::common::runtime(1, "retryscope-ship")?;
    runtime.block_on(async move {
        let shutdown = Arc::new(AtomicBool::new(false));
        let flag = shutdown.clone();
        tokio::spawn(async move {
            super::common::wait_for_signal().await;
            flag.store(true, Ordering::SeqCst);
        });
        let summary = ship(cfg, shutdown).await?;
        tracing::info!(
            lines = summary.lines,
            dead_letters = summary.dead_letters,
            "stopped"
        );
        Ok(ExitCode::SUCCESS)
    })
}
