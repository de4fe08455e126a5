//! Resuming `run`: the checkpoint is loaded, and refused (or, with `--reset-checkpoint`,
//! moved aside with the findings file) when it cannot be trusted: unreadable, another version,
//! or positions that are not its sources' and sinks' (file offsets, the OTLP spool position,
//! the findings file's length), or a spool position past the spool's end.

use super::checkpoint::{self, Checkpoint};
use super::{Engine, FileSource, OtlpFeed, RunError};

impl Engine {
    /// Load the checkpoint. An unusable one stops the start, unless `--reset-checkpoint`
    /// moves it and the findings file aside (then: start over).
    pub(super) fn load_checkpoint(
        &self,
        path: &std::path::Path,
    ) -> Result<Option<Checkpoint>, RunError> {
        let loaded = Checkpoint::load(path)
            .and_then(|cp| self.check_positions(path, cp))
            .and_then(|cp| self.check_spool_position(path, cp));
        match loaded {
            Err(checkpoint::CheckpointError::Unusable { why, .. }) if self.cfg.reset_checkpoint => {
                let findings = (!matches!(self.cfg.findings_out.as_str(), "" | "-"))
                    .then(|| std::path::Path::new(&self.cfg.findings_out));
                let moved =
                    checkpoint::set_aside(path, findings).map_err(|source| RunError::DataDir {
                        dir: path.display().to_string(),
                        source,
                    })?;
                let moved: Vec<String> = moved
                    .iter()
                    .map(|p| retryscope_core::sanitize::display(&p.to_string_lossy()).into_owned())
                    .collect();
                tracing::error!(
                    path = %path.display(), why, moved_to = %moved.join(", "),
                    "--reset-checkpoint: the unusable checkpoint and the findings file were moved aside; starting over from the beginning of every file"
                );
                Ok(None)
            }
            other => Ok(other?),
        }
    }

    /// The positions this run's sources and sinks will resume from must read as theirs: a
    /// checkpoint whose file offsets, spool position or findings length do not is unusable.
    fn check_positions(
        &self,
        path: &std::path::Path,
        cp: Option<Checkpoint>,
    ) -> Result<Option<Checkpoint>, checkpoint::CheckpointError> {
        let Some(cp) = cp else { return Ok(None) };
        let unusable = |why: String| checkpoint::CheckpointError::Unusable {
            path: path.display().to_string(),
            why,
        };
        FileSource::restore(cp.sources.get("files").cloned()).map_err(unusable)?;
        OtlpFeed::restore(cp.sources.get("otlp").cloned()).map_err(unusable)?;
        if let Some(v) = cp.sinks.get("findings")
            && !v.is_u64()
        {
            return Err(unusable(format!(
                "sinks.findings: {} is not a file length",
                if v.is_string() {
                    "a string"
                } else {
                    "a number out of range"
                }
            )));
        }
        Ok(Some(cp))
    }

    /// A checkpoint whose OTLP spool position lies past the end of the spool is unusable: it
    /// was not written against this spool.
    fn check_spool_position(
        &self,
        path: &std::path::Path,
        cp: Option<Checkpoint>,
    ) -> Result<Option<Checkpoint>, checkpoint::CheckpointError> {
        let (Some(dir), Some(pos)) = (
            self.cfg.data_dir.as_ref(),
            cp.as_ref().and_then(|c| c.otlp_spool()),
        ) else {
            return Ok(cp);
        };
        match crate::source::otlp::spool_check_position(
            &dir.join(crate::source::otlp::SPOOL_DIR),
            pos,
        ) {
            Ok(()) => Ok(cp),
            Err(why) => Err(checkpoint::CheckpointError::Unusable {
                path: path.display().to_string(),
                why,
            }),
        }
    }
}
