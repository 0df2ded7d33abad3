//! The Deployment aggregate, given/when/then: given these events, when this command, then
//! these events (or this error); and the actions a state calls for. One module per family of
//! commands, as `domain/src/deployment/` has them (`scheduling` follows the order steps are
//! scheduled and abandoned in across them); `shop` holds what they share, and `card` holds the
//! event card to the code.

mod shop;

mod advance;
mod attempt;
mod bastion;
mod cancel;
mod card;
mod dead_letter;
mod destroy;
mod failure;
mod host_keys;
mod interrupt;
mod redrive;
mod request;
mod scheduling;
mod seal;
mod services;
