//! The Deployment aggregate, given/when/then: given these events, when this command, then
//! these events (or this error); and the actions a state calls for. One module per family of
//! commands, as `domain/src/deployment/` has them; `shop` holds what they share.

mod shop;

mod advance;
mod attempt;
mod bastion;
mod cancel;
mod dead_letter;
mod destroy;
mod failure;
mod interrupt;
mod request;
mod seal;
