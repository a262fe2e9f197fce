//! The settings an open [`Store`](super::Store) has computed, by base config.
//!
//! The settings at the start of a conversation are a function of the
//! workspace's `config.toml` (read once per open store), the conversation's
//! base config blob (content-addressed: its id names its bytes) and this
//! build's [`SETTINGS_VERSION`](crate::config::SETTINGS_VERSION). Within one
//! open store only the base config varies, so its id is the whole key and a
//! remembered entry is never stale. A process that views conversations
//! again and again (an agent's) then reads neither the base config nor a
//! conversation's head cache for them (format-spec.md 4.6 is the cache that
//! lasts between processes).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use jpstore_blobstore::BlobId;

use crate::config::Settings;

/// How many base configs' settings are remembered: JP's conversations
/// mostly share a few base configs; the least recently used goes first.
pub(crate) const REMEMBERED: usize = 32;

/// The remembered settings, most recently used first.
#[derive(Debug, Default)]
pub(crate) struct SettingsMemo {
    entries: Mutex<VecDeque<(Option<BlobId>, Arc<Settings>)>>,
}

impl SettingsMemo {
    /// The settings remembered for base config `base` (`None`: none).
    pub(crate) fn get(&self, base: Option<&BlobId>) -> Option<Arc<Settings>> {
        let mut entries = self.entries.lock().ok()?;
        let at = entries.iter().position(|(b, _)| b.as_ref() == base)?;
        let entry = entries.remove(at)?;
        let settings = Arc::clone(&entry.1);
        entries.push_front(entry);
        Some(settings)
    }

    /// Remembers `settings` for base config `base`.
    pub(crate) fn put(&self, base: Option<BlobId>, settings: Arc<Settings>) {
        // A poisoned memo only forgets: every caller can compute anew.
        let Ok(mut entries) = self.entries.lock() else {
            return;
        };
        entries.retain(|(b, _)| *b != base);
        entries.push_front((base, settings));
        entries.truncate(REMEMBERED);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(prompt: &str) -> Arc<Settings> {
        let mut s = Settings::default();
        s.assistant.system_prompt = Some(prompt.into());
        Arc::new(s)
    }

    #[test]
    fn remembers_by_base_config_and_forgets_the_least_recently_used() {
        let memo = SettingsMemo::default();
        assert!(memo.get(None).is_none());
        memo.put(None, settings("none"));
        let ids: Vec<BlobId> = (0..REMEMBERED)
            .map(|i| BlobId::of(i.to_string().as_bytes()))
            .collect();
        for (i, id) in ids.iter().enumerate() {
            memo.put(Some(*id), settings(&i.to_string()));
        }
        // `None` was the least recently used: forgotten.
        assert!(memo.get(None).is_none());
        // Used, the first id is kept when one more comes; the second goes.
        let first = memo.get(Some(&ids[0])).expect("remembered");
        assert_eq!(first.assistant.system_prompt.as_deref(), Some("0"));
        memo.put(None, settings("again"));
        assert!(memo.get(Some(&ids[0])).is_some());
        assert!(memo.get(Some(&ids[1])).is_none());
        let again = memo.get(None).expect("remembered again");
        assert_eq!(again.assistant.system_prompt.as_deref(), Some("again"));
        // A second put for a key replaces the first.
        memo.put(Some(ids[2]), settings("replaced"));
        let replaced = memo.get(Some(&ids[2])).expect("remembered");
        assert_eq!(
            replaced.assistant.system_prompt.as_deref(),
            Some("replaced")
        );
        assert_eq!(memo.entries.lock().map(|e| e.len()).ok(), Some(REMEMBERED));
    }
}
