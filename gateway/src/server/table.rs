//! `Routes`: a router and the list of what it serves, built by the same calls, so
//! the OpenAPI document can be checked against the routes themselves.

use axum::Router;
use axum::handler::Handler;
use axum::http::Method;
use axum::routing::{MethodRouter, delete, get, patch, post, put};

/// A router with the `(method, path template)` of every route it holds; `S` is
/// the state its handlers extract from (a protocol's routes are generic over it,
/// needing only the parts they name, see [`axum::extract::FromRef`]).
pub(crate) struct Routes<S> {
    router: Router<S>,
    served: Vec<(Method, &'static str)>,
}

impl<S: Clone + Send + Sync + 'static> Routes<S> {
    /// No routes.
    pub(crate) fn new() -> Self {
        Self {
            router: Router::new(),
            served: Vec::new(),
        }
    }

    fn add(mut self, method: Method, path: &'static str, route: MethodRouter<S>) -> Self {
        // Axum merges method routers added for the same path.
        self.router = self.router.route(path, route);
        self.served.push((method, path));
        self
    }

    /// Serves `GET path`.
    pub(crate) fn get<H: Handler<T, S>, T: 'static>(self, path: &'static str, handler: H) -> Self {
        self.add(Method::GET, path, get(handler))
    }

    /// Serves `POST path`.
    pub(crate) fn post<H: Handler<T, S>, T: 'static>(self, path: &'static str, handler: H) -> Self {
        self.add(Method::POST, path, post(handler))
    }

    /// Serves `PUT path`.
    pub(crate) fn put<H: Handler<T, S>, T: 'static>(self, path: &'static str, handler: H) -> Self {
        self.add(Method::PUT, path, put(handler))
    }

    /// Serves `PATCH path`.
    pub(crate) fn patch<H: Handler<T, S>, T: 'static>(
        self,
        path: &'static str,
        handler: H,
    ) -> Self {
        self.add(Method::PATCH, path, patch(handler))
    }

    /// Serves `DELETE path`.
    pub(crate) fn delete<H: Handler<T, S>, T: 'static>(
        self,
        path: &'static str,
        handler: H,
    ) -> Self {
        self.add(Method::DELETE, path, delete(handler))
    }

    /// Adds every route of `other`.
    pub(crate) fn merge(mut self, other: Self) -> Self {
        self.router = self.router.merge(other.router);
        self.served.extend(other.served);
        self
    }

    /// What the routes serve.
    pub(crate) fn served(&self) -> &[(Method, &'static str)] {
        &self.served
    }

    /// The router.
    pub(crate) fn into_router(self) -> Router<S> {
        self.router
    }
}
