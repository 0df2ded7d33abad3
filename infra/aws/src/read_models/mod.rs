//! The read models on two DynamoDB tables, written by the projector one deployment at a time
//! ([`DeploymentViews`]), keeping the same contract as the SQLite read models
//! (`overture_projector::contract`).
//!
//! - **The deployments table** (partition key `id`, sort key `item`): per deployment, a header
//!   item (`item` = `view`) with `tenant`, `status`, `started_at`, `revision` (the last record
//!   folded in) and `view`, the `status --json` object without its steps as JSON text; and an
//!   item per step (`item` = `step#NAME`) with its `position` in the blueprint, the `revision`
//!   it was written at and its `view` as JSON text. A save writes the header and the steps the
//!   records changed only, so its cost does not grow with the deployment; `status` reads the
//!   deployment's items with one query.
//! - **The tenants table** (partition key `tenant`): one item per tenant with the counters
//!   `running`, `succeeded`, `failed`, `cancelled`, `total` and `last_deployment_at` (RFC 3339 in
//!   UTC with nanoseconds, fixed width, so text order is time order, and the time reads back
//!   exactly as recorded, as from the SQLite read models).
//! - **A save** is one `TransactWriteItems`: the header's `Put`, conditional on the revision it
//!   was loaded at (`attribute_not_exists(id)` for a new one), the changed steps' `Put`s, and
//!   the tenant's `Update`, which
//!   `ADD`s the counters' changes, so projectors of different deployments of one tenant never
//!   overwrite each other's counts. A cancelled transaction whose view condition failed is
//!   [`ViewError::Conflict`]: the projector reloads and folds again. `last_deployment_at` is set
//!   only if it moves forward: when that condition alone fails (an older deployment projected
//!   after a newer one), the save is made again without it. Steps beyond what one transaction
//!   holds (a new deployment of many steps) go first, in transactions of their own that check
//!   the header is still as loaded; each step's `Put` is conditional on not overwriting a step
//!   written at a later revision, so a projector that lost a race never undoes the winner's.
//! - **A tenant's deployments** are found through the table's global secondary index
//!   [`BY_TENANT`] (`tenant`, `started_at`; keys only; only headers have those attributes), so
//!   listing one tenant reads that tenant's entries, not the whole table; each view is then
//!   read by its key. The index is
//!   eventually consistent: a deployment projected a moment ago may be missing from its
//!   tenant's list for that moment (never from `status`, which reads its view by key).
//! - **The service registry** ([`overture_domain::registry`]) is kept in the deployments
//!   table too, one partition per tenant (`id` = `registry#TENANT`, which no deployment id can
//!   be, and which has no header, so no view is read from it): an item per registered
//!   instance (`item` = `instance#SERVICE#ADDRESS#PORT#DEPLOYMENT`, with `service`, `address`,
//!   `port`, `deployment`, `step`, `host`, `registered_at` and the `revision` of the record
//!   that wrote it) and one per interest (`item` = `interest#SERVICE#DEPLOYMENT`, with
//!   `service`, `deployment` and `watched`). A save writes what its records set in it in the
//!   same transactions as the view, each instance's put or delete conditional on the item not
//!   having been written at a later revision, as steps are; reading a tenant's registry is a
//!   query of its partition. Keeping it here rather than in a table of its own leaves the stack
//!   as it is.
//! - **Reads** are strongly consistent (but the index's); [`DynamoReadModels::tenants`] and
//!   [`DynamoReadModels::deployments`] follow `LastEvaluatedKey` to the last page.
//!
//! Where things are: `queries` reads views and summaries, `writes` saves a view
//! ([`DeploymentViews`]), `registry` keeps the service registry; here are the tables' names and
//! attributes, the store, and the tables' creation.
//!
//! [`DeploymentViews`]: overture_projector::DeploymentViews

use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::Client;
use chrono::SecondsFormat;
use overture_events::Timestamp;
use overture_projector::ViewError;

use crate::dynamodb::{
    create_sorted_table_with_index, create_table_keyed_by, DynamoError, KeysIndex,
};

mod queries;
mod registry;
mod writes;

const ID: &str = "id";
const ITEM: &str = "item";
/// The sort key of a deployment's header item.
const HEADER: &str = "view";
/// The sort key prefix of a deployment's step items.
const STEP: &str = "step#";
const POSITION: &str = "position";
const TENANT: &str = "tenant";
const STATUS: &str = "status";
const STARTED_AT: &str = "started_at";
const REVISION: &str = "revision";
const VIEW: &str = "view";
const LAST_DEPLOYMENT_AT: &str = "last_deployment_at";
/// The partition key prefix of a tenant's service registry.
const REGISTRY: &str = "registry#";
/// The sort key prefix of a registered instance.
const INSTANCE: &str = "instance#";
/// The sort key prefix of an interest in a service.
const INTEREST: &str = "interest#";
const SERVICE: &str = "service";
const ADDRESS: &str = "address";
const PORT: &str = "port";
const DEPLOYMENT: &str = "deployment";
const STEP_NAME: &str = "step";
const HOST: &str = "host";
const REGISTERED_AT: &str = "registered_at";
const WATCHED: &str = "watched";
/// The deployments table's index of each tenant's deployments by start (keys only).
pub const BY_TENANT: &str = "by-tenant";
/// The most keys one `BatchGetItem` asks for.
const BATCH_GET_KEYS: usize = 100;
/// The most writes one `TransactWriteItems` holds.
const TRANSACTION_ITEMS: usize = 100;

/// How many times a save is tried again when DynamoDB cancels it for a concurrent transaction
/// on the same tenant item (`TransactionConflict`), which says nothing about the view.
const TRANSACTION_CONFLICT_TRIES: u32 = 10;

/// The read models in a deployments table and a tenants table.
#[derive(Clone)]
pub struct DynamoReadModels {
    client: Client,
    deployments: String,
    tenants: String,
}

/// How one transaction ended.
enum Saved {
    Done,
    /// The view was not at the revision it was loaded at, or a step was written later.
    ViewMoved,
    /// Only `last_deployment_at` was already newer.
    NotNewest,
    /// Another transaction held an item; nothing was written.
    Busy,
}

fn timestamp(at: Timestamp) -> String {
    at.to_rfc3339_opts(SecondsFormat::Nanos, true)
}

fn unavailable(error: DynamoError) -> ViewError {
    ViewError::Unavailable(Box::new(error))
}

fn corrupt(error: DynamoError) -> ViewError {
    ViewError::Corrupt(Box::new(error))
}

impl DynamoReadModels {
    /// Read models in the `deployments` and `tenants` tables.
    pub fn new(client: Client, deployments: impl Into<String>, tenants: impl Into<String>) -> Self {
        Self {
            client,
            deployments: deployments.into(),
            tenants: tenants.into(),
        }
    }

    fn call_failed<E: std::error::Error + 'static>(
        table: &str,
        operation: &'static str,
        error: E,
    ) -> DynamoError {
        DynamoError::Call {
            table: table.to_owned(),
            operation,
            message: DisplayErrorContext(error).to_string(),
        }
    }
}

/// Creates the deployments and tenants tables unless they exist. For development and tests; on
/// AWS the stack makes them.
pub async fn create_read_model_tables(
    client: &Client,
    deployments: &str,
    tenants: &str,
) -> Result<(), DynamoError> {
    create_sorted_table_with_index(
        client,
        deployments,
        ID,
        ITEM,
        KeysIndex {
            name: BY_TENANT,
            partition: TENANT,
            sort: STARTED_AT,
        },
    )
    .await?;
    create_table_keyed_by(client, tenants, TENANT).await
}
