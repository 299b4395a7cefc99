//! The words of the demo feedback: per category and sentiment, topics whose titles and
//! bodies share `{slot}`s filled per row, so full-text search finds realistic phrasing.
//! Positive wording thanks the council, negative complains, neutral asks.

/// A feedback category as stored in `feedback.category`, with how common it is and how its
/// sentiment usually splits (weights out of their sum, not percentages).
pub(crate) struct Category {
    pub name: &'static str,
    pub weight: u32,
    /// (negative, neutral, positive)
    pub sentiment_weights: [u32; 3],
    pub negative: &'static [Topic],
    pub neutral: &'static [Topic],
    pub positive: &'static [Topic],
}

/// One thing people write about. Any title may go with any body of the same topic.
pub(crate) struct Topic {
    pub titles: &'static [&'static str],
    pub bodies: &'static [&'static str],
}

const fn t(titles: &'static [&'static str], bodies: &'static [&'static str]) -> Topic {
    Topic { titles, bodies }
}

pub(crate) const CATEGORIES: [Category; 8] = [
    Category {
        name: "roads",
        weight: 22,
        sentiment_weights: [60, 15, 25],
        negative: &[
            t(
                &[
                    "Potholes on {street}",
                    "Dangerous pothole on {street}",
                    "Pothole damaged my tyre on {street}",
                ],
                &[
                    "There is a deep pothole on {street} near {landmark} that has already burst two tyres. It fills with water when it rains so drivers cannot see how deep it is.",
                    "The potholes along {street} have been getting worse for {duration}. Cyclists are swerving into traffic to avoid them and someone is going to get hurt.",
                    "I reported the pothole outside number {house_no} {street} {times} and nothing has happened. My car needed a new tyre and wheel alignment after hitting it.",
                ],
            ),
            t(
                &[
                    "Street lights out on {street}",
                    "Broken street light near {landmark}",
                ],
                &[
                    "Three street lights on {street} have been out for {duration}. The road is pitch black in the evening and people feel unsafe walking home.",
                    "The street light outside {landmark} flickers on and off all night and has been completely dark since {month}.",
                ],
            ),
            t(
                &[
                    "Uneven pavement on {street}",
                    "Trip hazard on the footpath by {landmark}",
                ],
                &[
                    "The paving slabs on {street} are cracked and lifting. My elderly mother tripped and hurt her wrist last week.",
                    "Tree roots have pushed up the pavement near {landmark} and it is impossible to get a wheelchair or pushchair past.",
                ],
            ),
            t(
                &[
                    "Blocked drains flooding {street}",
                    "Road floods every time it rains",
                ],
                &[
                    "The gullies on {street} are blocked with leaves and the road floods after every heavy shower. Water is now coming up to the front doors.",
                    "Every time it rains the dip in {street} by {landmark} turns into a lake and cars spray pedestrians waiting at the crossing.",
                ],
            ),
            t(
                &["{street} not gritted", "No gritting on our hill"],
                &[
                    "{street} was not gritted during the cold snap in {month} and several cars slid into parked vehicles. The bus route gets gritted but our hill never does.",
                    "The road outside {landmark} was a sheet of ice for three days and no gritter came. Children were falling over on the way to school.",
                ],
            ),
            t(
                &[
                    "Roadworks on {street} overrunning",
                    "Temporary traffic lights left for weeks",
                ],
                &[
                    "Temporary traffic lights have been on {street} for {duration} but nobody seems to be working there. Queues stretch back past {landmark} at rush hour.",
                    "The roadworks on {street} were meant to take five days and it has now been {duration}. The diversion sends lorries down narrow residential roads.",
                ],
            ),
            t(
                &[
                    "Speeding traffic on {street}",
                    "Speed bumps needed on {street}",
                ],
                &[
                    "Cars race down {street} well above the 20mph limit, especially at night. We need speed bumps or a camera before a child is hit outside {landmark}.",
                ],
            ),
        ],
        neutral: &[
            t(
                &[
                    "Question about resurfacing plans for {street}",
                    "When will {street} be resurfaced?",
                ],
                &[
                    "Could you tell me whether {street} is in this year's resurfacing programme? The surface is worn but not dangerous yet.",
                    "I noticed markings sprayed on {street} and wondered if roadworks are planned and how long the road will be closed.",
                ],
            ),
            t(
                &["Request for a dropped kerb on {street}"],
                &[
                    "I would like to apply for a dropped kerb outside my house on {street}. What does the process involve and how much does it cost?",
                ],
            ),
            t(
                &["Update on pothole report for {street}"],
                &[
                    "I reported a pothole on {street} in {month} and the online tracker still says it is under review. Could someone confirm whether it has been inspected?",
                ],
            ),
        ],
        positive: &[
            t(
                &[
                    "Pothole fixed quickly on {street}",
                    "Thank you for repairing {street}",
                ],
                &[
                    "I reported a pothole on {street} on Monday and it was filled by Thursday. Thank you to the highways team for such a quick repair.",
                    "The pothole outside {landmark} that had been causing problems for months has finally been fixed properly. Really pleased, thank you.",
                ],
            ),
            t(
                &["Resurfacing of {street} looks great"],
                &[
                    "The resurfacing of {street} was finished ahead of schedule and the road is now smooth and safe. The crews were polite and kept residents informed. Thank you.",
                ],
            ),
            t(
                &["Street lights repaired on {street}"],
                &[
                    "The street lights on {street} were repaired within {days} of my report. It makes a real difference walking home in the dark. Thanks.",
                ],
            ),
            t(
                &["Thanks for gritting our road"],
                &[
                    "Thank you to the gritting crews who treated {street} early every morning during the icy spell in {month}. We could get to work safely.",
                ],
            ),
        ],
    },
    Category {
        name: "waste",
        weight: 20,
        sentiment_weights: [58, 17, 25],
        negative: &[
            t(
                &[
                    "Missed bin collection on {street}",
                    "Bins not collected again",
                    "Missed {bin} collection",
                ],
                &[
                    "Our {bin} bin on {street} has been missed {times} in a row. The bins are overflowing and attracting foxes and rats.",
                    "The crew skipped the whole of {street} this week. Every other street was done. When will our bins be emptied?",
                    "Our {bin} bin has not been collected for {weeks}. I have called {times} and each time I am told it will be collected the next day, but nobody comes.",
                ],
            ),
            t(
                &[
                    "Recycling not collected",
                    "Recycling tipped into the general waste lorry",
                ],
                &[
                    "I watched the crew tip our recycling bin into the general waste lorry. What is the point of sorting our rubbish if it all goes to landfill?",
                    "Recycling has not been collected on {street} for {weeks}. Boxes of cardboard are blowing down the road.",
                ],
            ),
            t(
                &[
                    "Fly-tipping on {street}",
                    "Fly-tipped mattresses near {landmark}",
                ],
                &[
                    "Someone has dumped mattresses, a sofa and bags of rubbish on {street} near {landmark}. It has been there for {duration} and is now spreading across the pavement.",
                    "Fly-tipping in the alley behind {street} is getting worse every week. Rats have been seen and the smell is awful in warm weather.",
                ],
            ),
            t(
                &["Paid for garden waste but no collections"],
                &[
                    "I paid £{amount} for the garden waste service but my brown bin has not been collected for {weeks}. I would like a refund for the missed collections.",
                ],
            ),
            t(
                &["Bin damaged by collection crew"],
                &[
                    "The lid of our {bin} bin was snapped off by the lorry and the bin was left in the middle of the road on {street}. Please replace it.",
                ],
            ),
            t(
                &["No slots at the recycling centre"],
                &[
                    "The household recycling centre booking system has had no free slots for {duration}. No wonder fly-tipping has increased.",
                ],
            ),
        ],
        neutral: &[
            t(
                &[
                    "Request for a larger bin",
                    "How do I order a new recycling bin?",
                ],
                &[
                    "We are a family of six and our general waste bin is always full. Can we apply for a larger bin and is there a charge?",
                    "We have just moved into a house on {street} and there is no recycling bin. How do I order one?",
                ],
            ),
            t(
                &["Bank holiday collection days"],
                &[
                    "Will bin collections on {street} move because of the bank holiday in {month}? The website calendar is not clear.",
                ],
            ),
            t(
                &["Bulky waste collection question"],
                &[
                    "How much is a bulky waste collection for a fridge and two chairs, and how soon can it be booked?",
                ],
            ),
        ],
        positive: &[
            t(
                &["Thank you to our bin crew", "Brilliant bin collection team"],
                &[
                    "Our bin crew on {street} are always cheerful and careful, and they put the bins back by the gate. Thank you for a great service.",
                ],
            ),
            t(
                &["Missed bin collected the same day"],
                &[
                    "Our recycling was missed this morning but after one phone call the crew came back the same afternoon. Thanks for sorting it so quickly.",
                ],
            ),
            t(
                &["Fly-tipping cleared quickly"],
                &[
                    "The fly-tipped rubbish I reported on {street} was cleared within {days}. Really impressed, thank you.",
                ],
            ),
            t(
                &["New food waste service works well"],
                &[
                    "The new weekly food waste collection is working well and our general waste bin is much emptier. Thank you.",
                ],
            ),
        ],
    },
    Category {
        name: "housing",
        weight: 12,
        sentiment_weights: [65, 17, 18],
        negative: &[
            t(
                &[
                    "Damp and mould in council flat",
                    "Black mould in my {room}",
                    "Mould making my children ill",
                ],
                &[
                    "There is black mould spreading across the walls and ceiling of the {room} in my council {home}. My children have constant coughs and the GP says the damp is making it worse.",
                    "I first reported damp and mould in our {home} on {street} {duration} ago. A surveyor visited but no repairs have been booked and the mould keeps coming back.",
                    "Water is coming through the window frames and the {room} wall is soaking. We have had to throw away clothes because of the mould.",
                ],
            ),
            t(
                &["No heating for {duration}", "Boiler still not repaired"],
                &[
                    "Our boiler broke {duration} ago and we still have no heating or hot water. I have a newborn baby and we are boiling kettles to wash.",
                    "Repair appointments keep getting cancelled on the day. I have taken time off work {times} and nobody has turned up to fix the heating.",
                ],
            ),
            t(
                &["Leak from the flat above"],
                &[
                    "Water has been leaking through my {room} ceiling from the flat above for {duration}. The ceiling is bulging and I am worried it will collapse.",
                ],
            ),
            t(
                &[
                    "Stuck on the housing waiting list",
                    "Overcrowded and waiting for a transfer",
                ],
                &[
                    "We have been on the housing waiting list for {years} in an overcrowded two-bedroom {home}. Five of us share one bedroom and nobody will tell us where we are on the list.",
                ],
            ),
            t(
                &["Lift broken in our block", "Communal areas not cleaned"],
                &[
                    "The lift in our block on {street} has been broken for {duration}. Elderly residents on the upper floors cannot get out.",
                    "The stairwells in our block on {street} have not been cleaned for {duration}. There is rubbish and broken glass on the landings.",
                ],
            ),
        ],
        neutral: &[
            t(
                &[
                    "Updating my housing application",
                    "Question about housing register banding",
                ],
                &[
                    "I have moved in with my partner and want to update my housing application. Which form do I need?",
                ],
            ),
            t(
                &["Request for a housing officer visit"],
                &[
                    "Could a housing officer contact me about a mutual exchange? I would like to move closer to my family in {district}.",
                ],
            ),
            t(
                &["Rent statement query"],
                &[
                    "My rent statement shows a different amount from my tenancy letter. Can someone explain the increase from {month}?",
                ],
            ),
        ],
        positive: &[
            t(
                &["Damp problem finally fixed", "Mould treated quickly"],
                &[
                    "After I reported damp and mould in the {room}, the council sent a team within {days} who fixed the ventilation and treated the walls. The {home} is dry now. Thank you.",
                ],
            ),
            t(
                &["Quick boiler repair"],
                &[
                    "Our boiler stopped working on Friday night and the emergency repairs team had it fixed by Saturday morning. Great service, thank you.",
                ],
            ),
            t(
                &["Helpful housing officer"],
                &[
                    "Our housing officer was really helpful and sorted out our transfer application quickly. Thank you for listening.",
                ],
            ),
            t(
                &["New windows fitted in our block"],
                &[
                    "New double-glazed windows were fitted throughout our block on {street}. The flats are warmer and quieter. Thanks to everyone involved.",
                ],
            ),
        ],
    },
    Category {
        name: "parks",
        weight: 10,
        sentiment_weights: [45, 17, 38],
        negative: &[
            t(
                &["Overgrown grass in {park}", "{park} not maintained"],
                &[
                    "The grass in {park} has not been cut for {duration} and is now knee high. Children cannot play football and the paths are overgrown with brambles.",
                    "Weeds and nettles have taken over the flower beds and paths in {park}. It used to be lovely and now it looks abandoned.",
                ],
            ),
            t(
                &[
                    "Broken play equipment at {park}",
                    "Broken {equipment} in the playground",
                ],
                &[
                    "The {equipment} in the playground at {park} has been broken and taped off for {duration}. It is the only play area within walking distance for many families.",
                    "There are sharp edges on the broken {equipment} at {park}. Someone will get hurt.",
                ],
            ),
            t(
                &[
                    "Litter and dog mess in {park}",
                    "Overflowing bins in {park}",
                ],
                &[
                    "The bins in {park} are overflowing every weekend and litter blows across the playing fields. There is also dog mess all over the paths.",
                ],
            ),
            t(
                &["Toilets closed at {park}"],
                &[
                    "The public toilets at {park} have been locked for {duration}. Families with young children have nowhere to go.",
                ],
            ),
            t(
                &["Vandalism in {park}"],
                &[
                    "The benches in {park} have been vandalised and there is broken glass around the skate park. It does not feel safe after dark.",
                ],
            ),
        ],
        neutral: &[
            t(
                &["Booking a football pitch"],
                &[
                    "How do I book a football pitch at {park} for a junior team on Saturday mornings?",
                ],
            ),
            t(
                &["Leaning tree in {park}"],
                &[
                    "A large tree near the entrance of {park} is leaning. Could someone check whether it is safe?",
                ],
            ),
            t(
                &["Community event in {park}"],
                &[
                    "We would like to hold a community picnic in {park} in {month}. Do we need permission and is there a fee?",
                ],
            ),
        ],
        positive: &[
            t(
                &["New play area at {park} is brilliant"],
                &[
                    "The new play area at {park} is brilliant. My children love the new {equipment} and it is always busy. Thank you to the parks team.",
                ],
            ),
            t(
                &["Thanks for keeping {park} beautiful"],
                &[
                    "The flower beds at {park} look beautiful this year and the grass is always neatly cut. Thank you to the gardeners.",
                ],
            ),
            t(
                &["Broken {equipment} repaired"],
                &[
                    "The broken {equipment} at {park} was repaired within {days} of reporting it. Quick work, thank you.",
                ],
            ),
        ],
    },
    Category {
        name: "transport",
        weight: 12,
        sentiment_weights: [60, 17, 23],
        negative: &[
            t(
                &[
                    "Bus service cancelled again",
                    "Number {bus} bus keeps being cancelled",
                    "Unreliable number {bus} bus",
                ],
                &[
                    "The number {bus} bus has been cancelled {times} this week without any notice. I was late for work again and the app still showed it as running.",
                    "Since the timetable changed in {month} the number {bus} only runs every hour and often does not turn up at all. People without cars are stranded.",
                ],
            ),
            t(
                &["Bus route cut leaves us isolated"],
                &[
                    "Funding for the number {bus} has been withdrawn and now there is no bus to the hospital from {street}. Elderly residents cannot get to appointments.",
                ],
            ),
            t(
                &["Broken bus shelter on {street}"],
                &[
                    "The glass in the bus shelter on {street} near {landmark} was smashed {duration} ago and there is nowhere to wait out of the rain.",
                ],
            ),
            t(
                &["Residents cannot park on {street}", "Parking permit delays"],
                &[
                    "Commuters park all day on {street} and residents cannot park near their homes. We need a residents' parking zone.",
                    "I applied for a residents' parking permit {duration} ago and it still has not arrived. I keep getting parking tickets outside my own house.",
                ],
            ),
            t(
                &["Cycle lane blocked by parked cars"],
                &[
                    "The cycle lane on {street} is blocked by parked cars every morning, forcing cyclists into busy traffic. There is no enforcement at all.",
                ],
            ),
            t(
                &["School bus did not turn up"],
                &[
                    "The school bus did not turn up {times} this month and my son missed the start of his exams.",
                ],
            ),
        ],
        neutral: &[
            t(
                &["Bus pass renewal question"],
                &[
                    "My older person's bus pass expires in {month}. How do I renew it and can I do it online?",
                ],
            ),
            t(
                &["Request for a new bus stop"],
                &[
                    "Could the council consider a bus stop near {landmark}? The nearest stop is a long walk for many residents.",
                ],
            ),
            t(
                &["Question about parking permit charges"],
                &[
                    "How much does a residents' parking permit cost for a second car, and is there a visitors' permit?",
                ],
            ),
        ],
        positive: &[
            t(
                &["New bus timetable is much better"],
                &[
                    "Since the new timetable the number {bus} runs every 15 minutes and is nearly always on time. Thank you for listening to passengers.",
                ],
            ),
            t(
                &["Thanks for the new cycle lane"],
                &[
                    "The new protected cycle lane on {street} feels much safer. I now cycle to work every day. Thank you.",
                ],
            ),
            t(
                &["Bus pass renewed quickly"],
                &[
                    "I renewed my bus pass online and it arrived within {days}. Very easy, thank you.",
                ],
            ),
            t(
                &["Real-time displays at bus stops"],
                &[
                    "The new real-time information display at the stop near {landmark} is really helpful. Great improvement, thank you.",
                ],
            ),
        ],
    },
    Category {
        name: "noise",
        weight: 10,
        sentiment_weights: [68, 16, 16],
        negative: &[
            t(
                &[
                    "Noisy neighbours every night",
                    "Loud music from neighbours until {hour}",
                    "Late-night noise from next door",
                ],
                &[
                    "My neighbours on {street} play loud music until {hour} most nights. I have a baby and we cannot sleep. I have complained {times} and nothing has changed.",
                    "Late-night noise from the flat next door: shouting, banging doors and parties every weekend. I am exhausted and dread going home.",
                ],
            ),
            t(
                &["Dog barking all day"],
                &[
                    "A dog on {street} barks constantly while its owners are at work. It has gone on for {duration} and I work night shifts.",
                ],
            ),
            t(
                &["Late-night noise from bar on {street}"],
                &[
                    "Customers from the bar on {street} spill out into the road shouting until {hour}. Glass is smashed and people urinate in our gardens.",
                ],
            ),
            t(
                &["Building work starting at 6am"],
                &[
                    "Construction work on the site near {landmark} starts before 7am, including Saturdays, with drilling and lorries reversing. Are these hours allowed?",
                ],
            ),
            t(
                &["Alarm ringing for days"],
                &[
                    "An alarm at a house on {street} has been ringing on and off for {days}. The owners are away and nobody is doing anything.",
                ],
            ),
        ],
        neutral: &[
            t(
                &["How do I report noise?"],
                &[
                    "What counts as a statutory noise nuisance, and how do I start a noise diary for the problem on {street}?",
                ],
            ),
            t(
                &["Sending noise recordings"],
                &[
                    "Can I use the noise app to send recordings of the late-night noise, or does an officer need to witness it?",
                ],
            ),
            t(
                &["Licensing hours question"],
                &[
                    "What are the licensed hours for the new bar on {street}? We want to know before deciding whether to object.",
                ],
            ),
        ],
        positive: &[
            t(
                &["Noise problem resolved", "Thank you, it is quiet again"],
                &[
                    "After I reported the late-night noise from my neighbours, an officer visited and served a notice. It has been quiet for {weeks}. Thank you so much.",
                ],
            ),
            t(
                &["Thank you to the noise team"],
                &[
                    "The out-of-hours noise team came out at {hour} and dealt with the party on {street}. Excellent response, thank you.",
                ],
            ),
            t(
                &["Construction hours now respected"],
                &[
                    "Since the council spoke to the developer near {landmark}, work starts at 8am as agreed. Thanks for stepping in.",
                ],
            ),
        ],
    },
    Category {
        name: "planning",
        weight: 7,
        sentiment_weights: [62, 23, 15],
        negative: &[
            t(
                &[
                    "Objection to planning application for {development}",
                    "Object to {development} on {street}",
                ],
                &[
                    "I strongly object to the planning application for {development} on {street}. The roads cannot cope with more traffic, the local school is full and there is nowhere to park.",
                    "The proposed {development} near {landmark} is far too big for the area and will overlook our gardens. Residents were not properly consulted.",
                ],
            ),
            t(
                &["Unauthorised building work on {street}"],
                &[
                    "A neighbour on {street} has built a large extension without planning permission. I reported it {duration} ago and enforcement have done nothing.",
                ],
            ),
            t(
                &["Planning decision delayed for months"],
                &[
                    "My application for a small rear extension was submitted {duration} ago and is still undecided. The builder will not hold our slot much longer.",
                ],
            ),
            t(
                &["Green fields lost to housing"],
                &[
                    "The council approved {development} on the fields behind {street} despite hundreds of objections. The flooding risk was ignored.",
                ],
            ),
        ],
        neutral: &[
            t(
                &["Do I need planning permission?"],
                &[
                    "Do I need planning permission for a garden room at the back of my house on {street}, or is it permitted development?",
                ],
            ),
            t(
                &["How to comment on an application"],
                &[
                    "How do I comment on the application for {development}? The consultation page does not load.",
                ],
            ),
            t(
                &["Pre-application advice fee"],
                &[
                    "What is the fee for pre-application advice on converting a house on {street} into two flats?",
                ],
            ),
        ],
        positive: &[
            t(
                &["Helpful planning officer"],
                &[
                    "The planning officer was very helpful and explained what we needed to change. Our extension was approved within eight weeks. Thank you.",
                ],
            ),
            t(
                &["Thank you for listening to residents"],
                &[
                    "Thank you for refusing the application for {development} near {landmark}. It is good to know residents' views were listened to.",
                ],
            ),
            t(
                &["Quick planning decision"],
                &[
                    "Our application was decided within the target time and the officer kept us updated throughout. Great service, thanks.",
                ],
            ),
        ],
    },
    Category {
        name: "council_tax",
        weight: 7,
        sentiment_weights: [62, 23, 15],
        negative: &[
            t(
                &["Council tax band too high", "Wrong council tax band"],
                &[
                    "Our house is in {band} but identical houses on {street} are in a lower band. We have been overpaying council tax for years.",
                    "I think my property is in the wrong council tax band. How can I appeal when the valuation office will not reply?",
                ],
            ),
            t(
                &["Council tax bill wrong", "Charged twice for council tax"],
                &[
                    "I have been charged council tax twice this month, £{amount} each time. I have rung {times} and still have no refund.",
                    "My council tax bill went up by £{amount} this year while services have been cut. Bins are collected less often and the library has shorter hours.",
                ],
            ),
            t(
                &["Single person discount removed"],
                &[
                    "My single person discount was removed without warning and I now owe £{amount}. I live alone and have sent the evidence {times}.",
                ],
            ),
            t(
                &["Summons for council tax I already paid"],
                &[
                    "I received a court summons for council tax arrears even though I paid in full in {month}. The £{amount} costs must be cancelled.",
                ],
            ),
            t(
                &["Direct debit still taking money"],
                &[
                    "I moved to {street} in {month} and the council tax direct debit is still taking money for my old address. Nobody answers the phone.",
                ],
            ),
        ],
        neutral: &[
            t(
                &["Paying council tax in twelve instalments"],
                &["Can I spread my council tax over twelve monthly instalments instead of ten?"],
            ),
            t(
                &["Moving house council tax"],
                &[
                    "I am moving to {street} in {month}. How do I tell you so my council tax account is updated?",
                ],
            ),
            t(
                &["Council tax reduction eligibility"],
                &[
                    "I have recently lost my job. Am I eligible for council tax reduction and how do I apply?",
                ],
            ),
        ],
        positive: &[
            t(
                &["Council tax refund processed quickly"],
                &[
                    "I overpaid my council tax after moving and the refund of £{amount} arrived within {days}. Thank you for the quick response.",
                ],
            ),
            t(
                &["Helpful council tax team"],
                &[
                    "The council tax team helped me set up a payment plan when I was struggling. They were kind and understanding. Thank you.",
                ],
            ),
            t(
                &["Easy online council tax account"],
                &[
                    "The new online council tax account makes it easy to see my bill and change my direct debit. Great improvement, thanks.",
                ],
            ),
        ],
    },
];

/// Closing sentences appended to some bodies, by sentiment (negative, neutral, positive).
pub(crate) const TAILS: [&[&str]; 3] = [
    &[
        "This has been going on for {duration}.",
        "I have reported this {times} and had no reply.",
        "Please can someone look at this urgently.",
        "Residents are losing patience.",
        "We pay our council tax and expect better.",
        "Previous reference numbers seem to have been ignored.",
    ],
    &[
        "Thanks in advance for your help.",
        "A reply by email would be fine.",
        "I could not find the answer on the website.",
    ],
    &[
        "Well done to everyone involved.",
        "Great to see the council listening to residents.",
        "Please pass on my thanks to the team.",
    ],
];

pub(crate) const STREET_NAMES: &[&str] = &[
    "Station",
    "Church",
    "Mill",
    "Park",
    "Victoria",
    "Albert",
    "Queen's",
    "King's",
    "Manor",
    "Green",
    "New",
    "Main",
    "School",
    "Chapel",
    "North",
    "South",
    "Springfield",
    "Highfield",
    "Windsor",
    "Oak",
    "Elm",
    "Beech",
    "Meadow",
    "Orchard",
    "Castle",
    "Bridge",
    "Market",
    "Grange",
    "Stanley",
    "Richmond",
    "Alexandra",
    "York",
    "Clarence",
    "Warwick",
    "Hawthorn",
    "Willow",
    "Cedar",
    "Rectory",
    "Vicarage",
    "Moor",
];

pub(crate) const STREET_KINDS: &[&str] = &[
    "Road", "Street", "Lane", "Avenue", "Close", "Drive", "Way", "Crescent", "Grove", "Terrace",
];

pub(crate) const LANDMARKS: &[&str] = &[
    "the primary school",
    "the library",
    "the Co-op",
    "St Mary's church",
    "the leisure centre",
    "the train station",
    "the health centre",
    "the community centre",
    "the post office",
    "the secondary school",
    "the retail park",
    "the Red Lion",
    "the fire station",
    "the care home",
];

pub(crate) const PARK_NAMES: &[&str] = &[
    "Victoria",
    "Jubilee",
    "Memorial",
    "Riverside",
    "Coronation",
    "Central",
    "Albert",
    "King George's",
    "Queen's",
    "Heath",
    "Abbey",
    "Castle",
    "Lakeside",
    "Millennium",
    "Peace",
];

pub(crate) const PARK_KINDS: &[&str] = &["Park", "Recreation Ground", "Gardens", "Playing Fields"];

pub(crate) const DURATIONS: &[&str] = &[
    "two weeks",
    "three weeks",
    "a month",
    "over a month",
    "six weeks",
    "two months",
    "three months",
    "four months",
    "six months",
    "nearly a year",
];

pub(crate) const DAYS: &[&str] = &[
    "24 hours",
    "two days",
    "three days",
    "four days",
    "48 hours",
    "a week",
];

pub(crate) const WEEKS: &[&str] = &[
    "two weeks",
    "three weeks",
    "a month",
    "four weeks",
    "five weeks",
];

pub(crate) const YEARS: &[&str] = &[
    "two years",
    "three years",
    "four years",
    "five years",
    "six years",
];

pub(crate) const TIMES: &[&str] = &[
    "twice",
    "three times",
    "four times",
    "five times",
    "several times",
];

pub(crate) const HOURS: &[&str] = &["midnight", "11pm", "1am", "2am", "3am", "4am"];

pub(crate) const BINS: &[&str] = &[
    "recycling",
    "general waste",
    "garden waste",
    "food waste",
    "glass",
];

pub(crate) const BANDS: &[&str] = &[
    "Band A", "Band B", "Band C", "Band D", "Band E", "Band F", "Band G", "Band H",
];

pub(crate) const DEVELOPMENTS: &[&str] = &[
    "a block of 60 flats",
    "a five-storey office block",
    "a drive-through restaurant",
    "an estate of 250 homes",
    "a 24-hour gym",
    "a phone mast",
    "a large warehouse",
    "student accommodation",
    "a petrol station",
    "a house in multiple occupation",
];

pub(crate) const MONTHS: &[&str] = &[
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

pub(crate) const ROOMS: &[&str] = &[
    "bedroom",
    "bathroom",
    "kitchen",
    "living room",
    "children's bedroom",
];

pub(crate) const HOMES: &[&str] = &["flat", "house", "maisonette", "bungalow"];

pub(crate) const EQUIPMENT: &[&str] = &[
    "swing",
    "slide",
    "roundabout",
    "climbing frame",
    "zip wire",
    "see-saw",
    "basket swing",
    "spring rocker",
];
