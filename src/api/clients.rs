//! What one client may hold at once of what the server has a bounded
//! number of. Connections (`[server] max_connections_per_client`): a
//! tenant's, counted once one of its requests authenticates on a
//! connection; without tokens, a remote address's, counted as the
//! connection is accepted. A client past its share gets 429
//! `too_many_connections` and the connection is closed, so that one client
//! cannot take every slot of `max_connections` from the others. Downloads
//! (`[limits] max_concurrent_downloads`): a tenant's, counted while a
//! workspace file's body is being sent.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use crate::run::Tenant;
use crate::sync::lock;

/// What each client holds of one bounded thing.
#[derive(Debug)]
pub struct ClientShares {
    limit: usize,
    counts: Mutex<HashMap<Client, usize>>,
}

/// Who a connection or a download is counted against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Client {
    Tenant(Arc<str>),
    Address(IpAddr),
}

/// One connection or download counted against its client, until dropped.
#[derive(Debug)]
pub struct Held {
    client: Client,
    registry: Arc<ClientShares>,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut counts = lock(&self.registry.counts);
        if let Some(count) = counts.get_mut(&self.client) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.client);
            }
        }
    }
}

impl ClientShares {
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            counts: Mutex::new(HashMap::new()),
        })
    }

    /// One more of `client`'s, unless it holds its share already.
    pub fn hold(self: &Arc<Self>, client: Client) -> Option<Held> {
        let mut counts = lock(&self.counts);
        let count = counts.entry(client.clone()).or_default();
        if *count >= self.limit {
            return None;
        }
        *count += 1;
        Some(Held {
            client,
            registry: Arc::clone(self),
        })
    }

    /// The share each client may hold.
    pub fn limit(&self) -> usize {
        self.limit
    }
}

/// A connection's place among its client's: whose it is, once known.
#[derive(Debug, Default)]
pub struct ConnectionClient(Mutex<Option<Held>>);

impl ConnectionClient {
    /// Counted against `held` from the start (its remote address).
    pub fn of(held: Held) -> Self {
        Self(Mutex::new(Some(held)))
    }

    /// Counts the connection against `tenant` (once: a connection already
    /// counted as that tenant's stays so); `false` when `tenant` holds its
    /// share already, and the connection must close.
    pub fn claim(&self, registry: &Arc<ClientShares>, tenant: &Tenant) -> bool {
        let mut held = lock(&self.0);
        if let Some(Held {
            client: Client::Tenant(current),
            ..
        }) = &*held
            && **current == *tenant.0
        {
            return true;
        }
        match registry.hold(Client::Tenant(Arc::from(tenant.0.as_str()))) {
            Some(tenant_held) => {
                *held = Some(tenant_held);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_holds_its_share_and_gets_it_back_as_connections_close() {
        let registry = ClientShares::new(2);
        let a = || Client::Tenant(Arc::from("a"));
        let first = registry.hold(a()).unwrap();
        let _second = registry.hold(a()).unwrap();
        assert!(registry.hold(a()).is_none(), "a's share is two");
        assert!(registry.hold(Client::Tenant(Arc::from("b"))).is_some());
        drop(first);
        assert!(registry.hold(a()).is_some(), "one came back");
        let connection = ConnectionClient::default();
        let b = Tenant("b".into());
        assert!(connection.claim(&registry, &b));
        assert!(connection.claim(&registry, &b), "counted once");
    }
}
