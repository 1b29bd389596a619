//! The response future: the inner service's future holding the request's permit, or a
//! refusal's ready result.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;

use super::gate::Permit;

pin_project! {
    /// Future of [`Admission`](super::Admission).
    ///
    /// An admitted request's future holds its permit until the inner future resolves
    /// (with a response or an error) or is dropped, whichever comes first; that moment
    /// is the request's completion.
    pub struct ResponseFuture<F: Future> {
        #[pin]
        state: State<F>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F: Future> {
        Admitted {
            #[pin]
            inner: F,
            permit: Option<Permit>,
        },
        Refused {
            out: Option<F::Output>,
        },
    }
}

impl<F: Future> ResponseFuture<F> {
    pub(crate) fn admitted(inner: F, permit: Permit) -> Self {
        Self {
            state: State::Admitted {
                inner,
                permit: Some(permit),
            },
        }
    }

    pub(crate) fn refused(out: F::Output) -> Self {
        Self {
            state: State::Refused { out: Some(out) },
        }
    }
}

impl<F: Future> Future for ResponseFuture<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Admitted { inner, permit } => {
                let out = ready!(inner.poll(cx));
                // Completion: release the slot and report the response time now, not
                // when the caller gets round to dropping the future.
                drop(permit.take());
                Poll::Ready(out)
            }
            StateProj::Refused { out } => {
                Poll::Ready(out.take().expect("ResponseFuture polled after completion"))
            }
        }
    }
}

impl<F: Future> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Admitted { permit, .. } if permit.is_some() => "admitted",
            State::Admitted { .. } => "completed",
            State::Refused { .. } => "refused",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}
