//! One async mutex per volume, so concurrent calls for the same volume (a CO
//! retrying while the first call still runs) run one after the other and never
//! make two namespaces. The gateway refusing a second namespace with the same UUID
//! is the backstop across processes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

#[derive(Debug, Default)]
pub struct VolumeLocks {
    locks: Mutex<HashMap<String, Weak<AsyncMutex<()>>>>,
}

impl VolumeLocks {
    /// Waits for and holds the lock of `key` until the guard drops.
    pub async fn lock(&self, key: &str) -> OwnedMutexGuard<()> {
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(|poison| poison.into_inner());
            // Forget locks nobody holds any more, so the map stays small.
            locks.retain(|_, lock| lock.strong_count() > 0);
            match locks.get(key).and_then(Weak::upgrade) {
                Some(lock) => lock,
                None => {
                    let lock = Arc::new(AsyncMutex::new(()));
                    locks.insert(key.to_string(), Arc::downgrade(&lock));
                    lock
                }
            }
        };
        lock.lock_owned().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn the_same_key_waits_and_another_does_not() {
        let locks = Arc::new(VolumeLocks::default());
        let first = locks.lock("a").await;
        let waiter = {
            let locks = Arc::clone(&locks);
            tokio::spawn(async move { drop(locks.lock("a").await) })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "a second holder of the same key got in");
        drop(locks.lock("b").await);
        drop(first);
        tokio::time::timeout(Duration::from_secs(5), waiter).await.unwrap().unwrap();
    }
}
