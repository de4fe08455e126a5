//! A stream decoder's state as a checkpoint keeps it ([`StreamDecoder::state`] and
//! [`StreamDecoder::resume`](super::provider::StreamDecoder)): the whole decoder through
//! serde, and the two shapes JSON cannot hold as they are (maps keyed by pairs; an option of
//! an option, whose `Some(None)` JSON would read back as `None`).

use std::collections::HashMap;
use std::hash::Hash;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The decoder as JSON (`None` if it cannot be written: not expected of plain data).
pub(crate) fn state_of<T: Serialize>(decoder: &T) -> Option<serde_json::Value> {
    serde_json::to_value(decoder).ok()
}

/// Replace `decoder` with the one `state` holds; `false` (and unchanged) when it does not fit.
pub(crate) fn resume_into<T: DeserializeOwned>(decoder: &mut T, state: serde_json::Value) -> bool {
    match serde_json::from_value(state) {
        Ok(d) => {
            *decoder = d;
            true
        }
        Err(_) => false,
    }
}

/// A map whose keys are not strings, as a list of `[key, value]`.
pub(crate) mod pairs {
    use super::*;

    pub(crate) fn serialize<K, V, S>(map: &HashMap<K, V>, s: S) -> Result<S::Ok, S::Error>
    where
        K: Serialize,
        V: Serialize,
        S: Serializer,
    {
        s.collect_seq(map.iter())
    }

    pub(crate) fn deserialize<'de, K, V, D>(d: D) -> Result<HashMap<K, V>, D::Error>
    where
        K: Deserialize<'de> + Eq + Hash,
        V: Deserialize<'de>,
        D: Deserializer<'de>,
    {
        Ok(Vec::<(K, V)>::deserialize(d)?.into_iter().collect())
    }
}

/// An `Option<Option<T>>` as `null` (none) or `[inner]`, so `Some(None)` stays itself.
pub(crate) mod nested_option {
    use super::*;

    pub(crate) fn serialize<T, S>(v: &Option<Option<T>>, s: S) -> Result<S::Ok, S::Error>
    where
        T: Serialize,
        S: Serializer,
    {
        v.as_ref().map(|inner| [inner]).serialize(s)
    }

    pub(crate) fn deserialize<'de, T, D>(d: D) -> Result<Option<Option<T>>, D::Error>
    where
        T: Deserialize<'de>,
        D: Deserializer<'de>,
    {
        Ok(Option::<[Option<T>; 1]>::deserialize(d)?.map(|[inner]| inner))
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::super::Format;
    use super::super::provider::{StreamDecoder, stream_decoder};
    use crate::event::Event;

    fn feed(d: &mut dyn StreamDecoder, lines: &[&[u8]], out: &mut Vec<Event<'static>>) {
        for l in lines {
            let _ = d.push_line(l, out);
        }
    }

    /// `bytes` read as `format` by one decoder, against a decoder that read it up to a cut,
    /// gave its state (through JSON) to a fresh one that read the rest: the same events and
    /// skips, at each of the first 30 lines and 30 more across the rest. The number of cuts
    /// tried.
    fn resumes_anywhere(format: Format, name: &str, bytes: &[u8]) -> usize {
        // Twice over: the second copy's calls are the stream's later turns.
        let text = [bytes, bytes].concat();
        let lines: Vec<&[u8]> = text.split(|b| *b == b'\n').collect();
        let whole = {
            let mut d = stream_decoder(format, name).expect("a stream decoder");
            let mut out = Vec::new();
            feed(d.as_mut(), &lines, &mut out);
            d.finish(&mut out);
            (out, d.skips())
        };
        let step = (lines.len() / 30).max(1);
        let mut cuts = 0;
        for cut in (0..=lines.len()).filter(|c| c % step == 0 || *c < 30) {
            let mut first = stream_decoder(format, name).expect("decoder");
            let mut out = Vec::new();
            feed(first.as_mut(), &lines[..cut], &mut out);
            let state = first.state().expect("the decoder keeps its state");
            let json = serde_json::to_string(&state).expect("encodes");
            let mut next = stream_decoder(format, name).expect("decoder");
            assert!(next.resume(serde_json::from_str(&json).expect("decodes")));
            feed(next.as_mut(), &lines[cut..], &mut out);
            next.finish(&mut out);
            assert!(
                (&out, next.skips()) == (&whole.0, whole.1),
                "{format} {name} cut at line {cut} of {}",
                lines.len()
            );
            cuts += 1;
        }
        cuts
    }

    fn fixtures() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
    }

    /// Files of `dir` (one level), or `file` in each of its folders.
    fn files(dir: &str, file: Option<&str>) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = std::fs::read_dir(fixtures().join(dir))
            .expect("fixtures")
            .flatten()
            .map(|e| match file {
                Some(f) => e.path().join(f),
                None => e.path(),
            })
            .filter(|p| p.is_file())
            .collect();
        out.sort();
        out
    }

    /// Every format with a stream decoder, on the recorded streams and the real agents'
    /// outputs in `tests/fixtures`: resumed at any line, a decoder decodes the rest as one
    /// that never stopped.
    #[test]
    fn every_stream_decoder_resumed_from_its_state_at_any_line_decodes_the_rest_as_one_would() {
        let sets: [(&str, &str, Option<&str>); 12] = [
            ("openai-chat", "providers/openai-chat", None),
            ("openai-responses", "providers/openai-responses", None),
            ("anthropic", "providers/anthropic", None),
            ("gemini", "providers/gemini", None),
            ("acp", "providers/acp", None),
            (
                "gemini-cli-responses",
                "providers/gemini-cli-responses",
                None,
            ),
            ("claude-code", "agents/claude-code", Some("stream.jsonl")),
            ("claude-code", "agents/qwen-code", Some("stream.jsonl")),
            ("codex-exec", "agents/codex", Some("exec.jsonl")),
            (
                "gemini-cli-stream-json",
                "agents/gemini-cli",
                Some("stream.jsonl"),
            ),
            (
                "gemini-cli-telemetry",
                "agents/gemini-cli",
                Some("telemetry.log"),
            ),
            (
                "gemini-cli-telemetry",
                "agents/qwen-code",
                Some("telemetry.log"),
            ),
        ];
        for (format, dir, file) in sets {
            let format: Format = format.parse().expect("a format");
            // Three runs of each agent (its folders hold ten, alike); every provider stream.
            let runs = if file.is_some() { 3 } else { usize::MAX };
            let paths: Vec<PathBuf> = files(dir, file).into_iter().take(runs).collect();
            assert!(!paths.is_empty(), "{dir}");
            let mut cuts = 0;
            for path in paths {
                let bytes = std::fs::read(&path).expect("read");
                let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
                cuts += resumes_anywhere(format, &name.unwrap_or_default(), &bytes);
            }
            assert!(cuts > 4, "{format}: {cuts} cuts");
        }
    }

    /// A state that is not the decoder's is refused, and the decoder is left as it was.
    #[test]
    fn a_state_that_does_not_fit_is_refused() {
        for format in [
            Format::Anthropic,
            Format::ClaudeCode,
            Format::GeminiCliResponses,
        ] {
            let mut d = stream_decoder(format, "x").expect("decoder");
            let before = d.state();
            assert!(!d.resume(serde_json::json!({"ctx": 1})), "{format}");
            assert!(!d.resume(serde_json::json!([])), "{format}");
            assert_eq!(d.state(), before, "{format}");
        }
    }

    #[test]
    fn an_option_of_an_option_keeps_some_none() {
        #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
        struct T(#[serde(with = "super::nested_option")] Option<Option<i64>>);
        for v in [T(None), T(Some(None)), T(Some(Some(7)))] {
            let json = serde_json::to_string(&v).expect("encodes");
            assert_eq!(
                serde_json::from_str::<T>(&json).expect("decodes"),
                v,
                "{json}"
            );
        }
    }
}
