//! The native event lines the tracker writes: one struct, one variant of fields per type.

use serde::Serialize;
use serde_json::value::RawValue;

#[derive(Serialize)]
pub(super) struct Line<'a> {
    pub(super) turn: &'a str,
    #[serde(rename = "type")]
    pub(super) kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) attempt: Option<u32>,
    pub(super) ts: i64,
    #[serde(flatten)]
    pub(super) fields: Fields<'a>,
}

#[derive(Serialize)]
#[serde(untagged)]
pub(super) enum Fields<'a> {
    None {},
    TurnStart {
        provider: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        model: Option<&'a str>,
        session: &'a str,
        agent: &'a str,
        /// Always true: the proxy sees the wire, never the client's display.
        wire_only: bool,
    },
    AttemptStart {
        #[serde(skip_serializing_if = "Option::is_none")]
        model: Option<&'a str>,
    },
    Retry {
        reason: &'a str,
        /// A continuation's partial output (the text the retry request carries).
        #[serde(skip_serializing_if = "Option::is_none")]
        prefill: Option<&'a str>,
    },
    Chunk {
        provider: &'a str,
        data: &'a RawValue,
    },
    Error {
        message: &'a str,
        code: &'a str,
    },
    Exec {
        id: &'a str,
        name: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        args: Option<&'a serde_json::Value>,
        /// `error` when the result is marked one.
        #[serde(skip_serializing_if = "Option::is_none")]
        status: Option<&'a str>,
        /// The start of the result the client sent back (evidence of an abort).
        #[serde(skip_serializing_if = "Option::is_none")]
        result: Option<&'a str>,
    },
    Output {
        text: &'a str,
    },
}
