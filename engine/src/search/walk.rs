//! The texts of a conversation that `grep` searches, walked in order: each
//! part's text (messages, reasoning, tool arguments and output, resources),
//! where it is (turn, entry, role), inline or in a blob.

use std::collections::HashMap;

use crate::conversation::read::Conversation;
use crate::event::turns::TurnCounter;
use serde_json::Value;

use crate::event::{BlobRef, Block, ChatResponse, Entry, EventKind, ResourceContent};

use super::{entry_type, role, Role};

/// One text of a conversation that is searched, where [`walk`] found it.
pub struct Step<'c> {
    /// The turn of its entry.
    pub turn: u64,
    /// The index of its entry in the log.
    pub entry: usize,
    /// The entry's type.
    pub entry_type: &'c str,
    /// Who the entry is from.
    pub role: Role,
    /// Which text of the entry.
    pub part: &'static str,
    /// The text, or the blob holding it.
    pub text: Text<'c>,
    /// The resource's URI (`resource` parts).
    pub uri: Option<&'c str>,
    /// The tool's name (`arguments`, `result`), if known.
    pub tool: Option<&'c str>,
}

/// A text to search: held in the log (decoded), or in a blob.
pub enum Text<'c> {
    /// The text itself.
    Inline(&'c [u8]),
    /// The blob holding it.
    Blob(&'c BlobRef),
}

/// Hands every text of `conversation` that is searched to `visit`, in log
/// order (`the module documentation` says which); stops when
/// `visit` returns `false`.
pub fn walk(conversation: &Conversation, visit: &mut dyn FnMut(Step<'_>) -> bool) {
    let mut turns = TurnCounter::new();
    let mut tools: HashMap<&str, &str> = HashMap::new();
    for (index, entry) in conversation.entries.iter().enumerate() {
        let turn = turns.step(entry).turn;
        let (entry_type, role) = (entry_type(entry), role(entry));
        fn make<'c>(
            (turn, entry, entry_type, role): (u64, usize, &'c str, Role),
            part: &'static str,
            text: Text<'c>,
        ) -> Step<'c> {
            Step {
                turn,
                entry,
                entry_type,
                role,
                part,
                text,
                uri: None,
                tool: None,
            }
        }
        let place = (turn, index, entry_type, role);
        let go_on = match entry {
            Entry::Unknown(object) => {
                let text = Value::Object(object.clone()).to_string();
                visit(make(place, "entry", Text::Inline(text.as_bytes())))
            }
            Entry::Event(e) => match &e.kind {
                EventKind::TurnStart | EventKind::ConfigDelta(_) | EventKind::CompactionUndo(_) => {
                    true
                }
                EventKind::ChatRequest(r) => {
                    visit(make(place, "message", Text::Inline(r.content.as_bytes())))
                        && r.resources.iter().all(|res| match &res.content {
                            ResourceContent::Text(blob) => visit(Step {
                                uri: Some(&res.uri),
                                ..make(place, "resource", Text::Blob(blob))
                            }),
                            ResourceContent::Binary(_) => true,
                        })
                }
                EventKind::ChatResponse(ChatResponse::Message(m)) => {
                    visit(make(place, "message", Text::Inline(m.as_bytes())))
                }
                EventKind::ChatResponse(ChatResponse::Reasoning(m)) => {
                    visit(make(place, "reasoning", Text::Inline(m.as_bytes())))
                }
                EventKind::ChatResponse(ChatResponse::Data(d)) => {
                    visit(make(place, "data", Text::Inline(d.to_string().as_bytes())))
                }
                EventKind::ToolCallRequest(r) => {
                    tools.insert(&r.id, &r.name);
                    let text = arguments_text(&r.arguments);
                    visit(Step {
                        tool: Some(&r.name),
                        ..make(place, "arguments", Text::Inline(text.as_bytes()))
                    })
                }
                EventKind::ToolCallResponse(r) => {
                    let tool = tools.get(r.id.as_str()).copied();
                    r.content.iter().all(|block| match block {
                        Block::Text(t) => visit(Step {
                            tool,
                            ..make(place, "result", Text::Blob(&t.text))
                        }),
                        Block::Resource(b) => match &b.resource.content {
                            ResourceContent::Text(blob) => visit(Step {
                                uri: Some(&b.resource.uri),
                                tool,
                                ..make(place, "resource", Text::Blob(blob))
                            }),
                            ResourceContent::Binary(_) => true,
                        },
                        Block::Other(o) => {
                            let text = Value::Object(o.clone()).to_string();
                            visit(Step {
                                tool,
                                ..make(place, "result", Text::Inline(text.as_bytes()))
                            })
                        }
                    })
                }
                EventKind::InquiryRequest(r) => match r.question.get("text") {
                    Some(Value::String(s)) => {
                        visit(make(place, "question", Text::Inline(s.as_bytes())))
                    }
                    _ => {
                        let text = Value::Object(r.question.clone()).to_string();
                        visit(make(place, "question", Text::Inline(text.as_bytes())))
                    }
                },
                EventKind::InquiryResponse(r) => match &r.answer {
                    Value::String(s) => visit(make(place, "answer", Text::Inline(s.as_bytes()))),
                    other => visit(make(
                        place,
                        "answer",
                        Text::Inline(other.to_string().as_bytes()),
                    )),
                },
                EventKind::Compaction(c) => match &c.summary {
                    Some(s) => visit(make(place, "summary", Text::Inline(s.as_bytes()))),
                    None => true,
                },
            },
        };
        if !go_on {
            return;
        }
    }
}

/// A tool call's arguments as searched: a `key: value` line per argument,
/// a string as it is, any other value as JSON.
pub fn arguments_text(arguments: &crate::event::Object) -> String {
    let mut text = String::new();
    for (key, value) in arguments {
        text.push_str(key);
        text.push_str(": ");
        match value {
            Value::String(s) => text.push_str(s),
            other => text.push_str(&other.to_string()),
        }
        text.push('\n');
    }
    text
}
